"""Fixtures for sandbox tests that kill their harness."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def harness_tmpdir() -> Iterator[Path]:
    """A TMPDIR for a harness process the test SIGKILLs: its session folders cannot be deleted
    by the dead harness, so the test deletes them. World-searchable, as the local backend needs
    when root hands bwrap to uid 65534 (pytest's own tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="coderoom-test-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)
