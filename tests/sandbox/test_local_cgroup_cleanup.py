"""A session's memory cgroup is removed even when something of the session outlived its bwrap
(found by the SDK's conformance run: a bwrap killed while it set the sandbox up leaves its inner
half waiting forever, and rmdir failed with EBUSY until the session's close raised)."""

from __future__ import annotations

import subprocess
import time

import pytest

from coderoom.sandboxes.local.cgroup import MemoryCgroup


def test_remove_kills_what_is_left_in_the_cgroup_and_removes_it() -> None:
    cgroup = MemoryCgroup.for_session(256 * 1024**2)
    if cgroup is None:
        pytest.skip("no memory cgroup here (cgroup v1 as root, or a delegated v2)")
    leftover = subprocess.Popen(["sleep", "60"])
    try:
        cgroup.admit(leftover.pid)
        assert str(leftover.pid) in (cgroup.path / "cgroup.procs").read_text().split()
        start = time.monotonic()
        cgroup.remove()  # rmdir refused (EBUSY) while sleep is in it: it is killed, then removed
        assert not cgroup.path.exists()
        assert time.monotonic() - start < 5
    finally:
        leftover.kill()
        assert leftover.wait(5) == -9
