"""What a failed write on the host's disk means, in the words every surface reports: the one
place that turns an OSError from saving a run into "no space left on the disk holding X".

Why one place: a full runs disk reaches the caller through a session's close, a session's open
and a one-shot run's save; each must name the disk and what is kept in the same words (MCP
`isError`, serve's 507, the CLI's message), and only a check of the file system can say how
much room is left.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

FULL = {errno.ENOSPC, errno.EDQUOT}


def _free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the disk holding `path` (its nearest
    existing folder); None when it cannot be asked."""
    for folder in (path, *path.parents):
        try:
            stats = os.statvfs(folder)
        except OSError:
            continue
        return stats.f_bavail * stats.f_frsize
    return None


def write_problem(exc: OSError, path: Path) -> str:
    """Why writing under `path` failed: a full disk (with what is free on it), a read-only one,
    or the system's own words."""
    where = f"the disk holding {path}"
    if exc.errno in FULL:
        free = _free_bytes(path)
        room = f" ({free:,} bytes free)" if free is not None else ""
        return f"no space left on {where}{room}"
    if exc.errno == errno.EROFS:
        return f"{where} is read-only"
    return f"{exc.strerror or type(exc).__name__} on {where}"


def sync_folder(folder: Path) -> None:
    """fsync a folder, so a rename into it survives a crash; raises OSError as a write does."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
