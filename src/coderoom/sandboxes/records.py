"""The small files the host keeps in a local session folder beside the sandbox's workspace
(`lease`, `cgroup`, `bwrap`, `session`, `run`) or in a Docker session's binding folder (`lease`,
`run`): who owns the folder, what `prune` may kill and remove, and which run it serves.

`prune` runs as root and acts on them, so a record counts only when nobody but the user running
coderoom could have written it: the folder is a real directory (not a link) owned by this uid
and writable by no one else (as root the sandbox's uid 65534 may traverse it, never add, rename
or remove an entry: see `local.host_dir.make`), and the record is a regular file in it, owned by
this uid, with one link, writable by no one else, opened without following links and read with
a bound. Anything else is no record. Every reader and writer of these files goes through here.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
RUN_FILE = "run"  # the run folder and run id a session serves (see `bind_run`)
MAX_RUN_RECORD = 8192


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


def bind_run(folder: Path, run_dir: Path, owner: str, **more: str) -> None:
    """Record in `folder` that its session serves the run folder `run_dir` (absolute) of the run
    `owner` (its run_start's run_id), with the backend's `more` (say, a container's name), so a
    recovery after the owner process died knows where to save it or what to name (`bound_run`)."""
    data = {**more, "run_dir": str(run_dir), "owner": owner}
    write(folder, RUN_FILE, json.dumps(data).encode(), replace=True)


def bound_run(folder: Path, *more: str) -> tuple[Path, str, dict[str, str]] | None:
    """The (run folder, run id, the `more` fields) `bind_run` recorded, or None: no trusted
    record, or not one `bind_run` wrote with those fields. A claim only: the caller verifies the
    run folder before writing there."""
    data = read(folder, RUN_FILE, MAX_RUN_RECORD)
    try:
        value = json.loads(data) if data is not None and len(data) < MAX_RUN_RECORD else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    run_dir, owner, extra = value.get("run_dir"), value.get("owner"), {key: value.get(key) for key in more}
    if not (isinstance(run_dir, str) and isinstance(owner, str) and os.path.isabs(run_dir)):
        return None
    if not all(isinstance(item, str) for item in extra.values()):
        return None
    return Path(run_dir), owner, {key: str(item) for key, item in extra.items()}
