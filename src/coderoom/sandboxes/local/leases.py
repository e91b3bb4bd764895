"""Leases of local session folders: who owns one, and whether that owner is gone.

Each session folder (`coderoom-local-*` in the temp dir) gets a lease naming its owner when it
is made (`claim`). `host_dir.prune` removes the folders whose owner is gone (`abandoned`), first
killing any process still using one (`kill_users`: a launcher whose host was SIGKILLed dies by
itself, but nothing is assumed). A folder without a lease is judged by age: a crash between creating it and writing the lease
leaves one, and it is removed once older than LEASELESS_GRACE_S. A live owner's folder is
never touched.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ..leases import LEASE_FILE, read_lease, write_lease

LEASELESS_GRACE_S = 600.0


def claim(host_dir: Path) -> None:
    """Mark a new session folder as this process's."""
    write_lease(host_dir)


def take_over(host_dir: Path) -> None:
    """Make an abandoned session folder this process's (a resume adopting it, see `host_dir.adoptable`)."""
    (host_dir / LEASE_FILE).unlink(missing_ok=True)
    write_lease(host_dir)


def abandoned(folder: Path) -> bool:
    owner = read_lease(folder)
    if owner is not None:
        return not owner.alive()
    try:
        return time.time() - os.lstat(folder).st_mtime > LEASELESS_GRACE_S
    except FileNotFoundError:
        return False


def kill_users(folder: Path) -> None:
    """SIGKILL processes whose command line names `folder` (bwrap gets its paths as arguments)."""
    marker = os.fsencode(folder)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue
