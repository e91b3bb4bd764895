"""Leases of local session folders, and `prune` for the local backend.

Each session folder (`coderoom-local-*` in the temp dir) gets a lease naming its owner when it
is made (`claim`). `prune` removes the folders whose owner is gone, first killing any process
still using one (a launcher whose host was SIGKILLed dies by itself, but nothing is assumed).
A folder without a lease is judged by age: a crash between creating it and writing the lease
leaves one, and it is removed once older than LEASELESS_GRACE_S. A live owner's folder is
never touched.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ...errors import SandboxUnavailable
from ...hostile import tree
from ..leases import read_lease, write_lease

LEASELESS_GRACE_S = 600.0


def claim(host_dir: Path) -> None:
    """Mark a new session folder as this process's."""
    write_lease(host_dir)


def prune() -> int:
    """Remove session folders whose owner is gone; returns how many."""
    from .session import _HOST_DIR_PREFIX, _host_parent, _owned_host_dir

    try:
        parent = _host_parent()
    except SandboxUnavailable:
        return 0
    removed = 0
    for folder in sorted(parent.glob(f"{_HOST_DIR_PREFIX}*")):
        if not _owned_host_dir(folder) or not _abandoned(folder):
            continue
        _kill_users(folder)
        tree.remove_tree(folder)
        removed += 1
    return removed


def _abandoned(folder: Path) -> bool:
    owner = read_lease(folder)
    if owner is not None:
        return not owner.alive()
    try:
        return time.time() - os.lstat(folder).st_mtime > LEASELESS_GRACE_S
    except FileNotFoundError:
        return False


def _kill_users(folder: Path) -> None:
    """SIGKILL processes whose command line names `folder` (bwrap gets its paths as arguments)."""
    marker = os.fsencode(folder)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue
