"""Fixtures shared by the fault suites."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import require_backend


@pytest.fixture
def tmpdir_for_sessions() -> Iterator[Path]:
    """A TMPDIR of the test's own for local sessions, searchable by the uid bwrap runs as when root."""
    require_backend("local")
    folder = Path(tempfile.mkdtemp(prefix="coderoom-test-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temp dir of the test's own, where the prunes of node and session folders look (TMPDIR and
    tempfile's cached choice both point there)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path
