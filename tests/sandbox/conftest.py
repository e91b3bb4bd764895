"""Fixtures for sandbox tests: a TMPDIR for harnesses they kill, and the Docker engine."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backends import require_backend


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


@pytest.fixture
def docker_engine() -> None:
    """The Docker backend can run here (else a skip, or a failure with CODEROOM_REQUIRE_DOCKER=1):
    `pytestmark = pytest.mark.usefixtures("docker_engine")` in a module of Docker tests."""
    require_backend("docker")


@pytest.fixture
def client(docker_engine: None) -> Any:
    """The Docker engine's own client, for tests that look at containers and networks directly."""
    from coderoom.sandboxes.docker.image import docker_client

    return docker_client()
