"""The small files the host keeps in a local session folder beside the sandbox's workspace
(`lease`, `cgroup`, `bwrap`, `session`): who owns the folder, and what `prune` may kill and remove.

`prune` runs as root and acts on them, so a record counts only when nobody but the user running
coderoom could have written it: the folder is a real directory (not a link) owned by this uid
and writable by no one else (as root the sandbox's uid 65534 may traverse it, never add, rename
or remove an entry: see `local.host_dir.make`), and the record is a regular file in it, owned by
this uid, with one link, writable by no one else, opened without following links and read with
a bound. Anything else is no record. Every reader and writer of these files goes through here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def trusted_folder(st: os.stat_result) -> bool:
    """Whether a folder with this (l)stat may hold records: ours, and only we can change its entries."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & _OTHERS_WRITE


def read(folder: Path, name: str, limit: int) -> bytes | None:
    """The first `limit` bytes of record `name` in `folder`, or None unless folder and record are
    trusted (see the module docstring)."""
    try:
        folder_fd = os.open(folder, _DIR_FLAGS)
    except OSError:
        return None
    try:
        if not trusted_folder(os.fstat(folder_fd)):
            return None
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd)
    except OSError:
        return None
    finally:
        os.close(folder_fd)
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_nlink == 1):
            return None
        if st.st_mode & _OTHERS_WRITE:
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def write(folder: Path, name: str, data: bytes, *, replace: bool = False) -> None:
    """Write record `name` in `folder` (mode 0600, never through a link); without `replace`, only
    if it does not exist yet."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if replace else os.O_EXCL
    folder_fd = os.open(folder, _DIR_FLAGS)
    try:
        fd = os.open(name, flags, 0o600, dir_fd=folder_fd)
    finally:
        os.close(folder_fd)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
