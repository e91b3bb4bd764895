"""Host-side handling of a sandbox workspace directory, which is hostile.

Everything here walks with directory fds and O_NOFOLLOW, iteratively (a 1100-level tree makes
`shutil.rmtree`, `copytree` and `tarfile.add` raise RecursionError on 3.11: catalogue ART-06),
never opens a FIFO or device for reading, and never follows a symlink the sandbox planted.
Sandbox processes may change the tree during a walk (the workspace watchdog runs beside a
command; a long-lived process such as the run_python kernel may run at any time): an entry that
vanishes or turns into a link between listing and opening is skipped, and nothing is followed.
"""

from __future__ import annotations

import errno
import io
import itertools
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MAX_DEPTH = 256
MAX_ENTRIES = 100_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1024 * 1024
# an entry removed or replaced (by a link, a file) between listing and opening: a live process
# (a command, while the watchdog walks; the run_python kernel, at any time) changed the tree
_GONE = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EINVAL}  # EINVAL: readlink of a non-link


def _show(rel: object) -> str:
    """A path for an error message: escaped and short (names are attacker-chosen)."""
    text = repr(str(rel))
    return text if len(text) <= 80 else text[:77] + "..."


class WorkspaceLimitError(OSError):
    """The workspace is larger, deeper or has more entries than allowed."""


@dataclass
class Entry:
    rel: PurePosixPath
    name: str
    dir_fd: int  # the parent directory, valid while the walk is at this entry
    st: os.stat_result


def walk(root: Path, *, max_depth: int = MAX_DEPTH) -> Iterator[Entry]:
    """Every entry under `root` (not root itself), parents before children, without following links."""
    root_fd = os.open(root, _DIR_FLAGS)
    stack: list[tuple[int, PurePosixPath, Iterator[str]]] = [
        (root_fd, PurePosixPath(), iter(sorted(os.listdir(root_fd))))
    ]
    try:
        while stack:
            dir_fd, rel, names = stack[-1]
            name = next(names, None)
            if name is None:
                os.close(dir_fd)
                stack.pop()
                continue
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            entry = Entry(rel / name, name, dir_fd, st)
            yield entry
            if stat.S_ISDIR(st.st_mode):
                if len(stack) >= max_depth:
                    raise WorkspaceLimitError(f"{_show(entry.rel)}: deeper than {max_depth} levels")
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError as exc:
                    if exc.errno in _GONE:
                        continue
                    raise
                stack.append((child, entry.rel, iter(sorted(os.listdir(child)))))
    finally:
        for dir_fd, _, _ in stack:
            os.close(dir_fd)


def usage(root: Path, *, max_entries: int = MAX_ENTRIES) -> int:
    """Apparent size in bytes (st_size, so a sparse file counts in full); raises past the limits."""
    total = 0
    for count, entry in enumerate(walk(root), start=1):
        if count > max_entries:
            raise WorkspaceLimitError(f"more than {max_entries} entries")
        total += entry.st.st_size
    return total


def archive(
    root: Path,
    *,
    skip: set[PurePosixPath],
    max_bytes: int,
    max_entries: int = MAX_ENTRIES,
) -> io.BufferedRandom:
    """A tar of the workspace with relative names: dirs, regular files, symlinks kept as links.

    FIFOs, sockets and devices are left out; files are opened O_NOFOLLOW|O_NONBLOCK and checked
    to be regular after opening. Modes are normalised (no setuid/setgid/sticky).
    """
    import tempfile

    out = tempfile.TemporaryFile()
    total = 0
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for count, entry in enumerate(walk(root), start=1):
            if count > max_entries:
                raise WorkspaceLimitError(f"more than {max_entries} entries")
            if any(entry.rel == s or s in entry.rel.parents for s in skip):
                continue
            info = tarfile.TarInfo(entry.rel.as_posix())
            info.mtime = int(entry.st.st_mtime)
            mode = stat.S_IMODE(entry.st.st_mode) & 0o777
            if stat.S_ISDIR(entry.st.st_mode):
                info.type, info.mode = tarfile.DIRTYPE, mode | 0o700
                tar.addfile(info)
            elif stat.S_ISLNK(entry.st.st_mode):
                try:
                    info.linkname = os.readlink(entry.name, dir_fd=entry.dir_fd)
                except OSError as exc:
                    if exc.errno in _GONE:
                        continue
                    raise
                info.type, info.mode = tarfile.SYMTYPE, 0o777
                tar.addfile(info)
            elif stat.S_ISREG(entry.st.st_mode):
                total += _add_file(tar, info, entry, mode, max_bytes - total)
    out.seek(0)
    return out  # type: ignore[return-value]


def _add_file(tar: tarfile.TarFile, info: tarfile.TarInfo, entry: Entry, mode: int, budget: int) -> int:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(entry.name, flags, dir_fd=entry.dir_fd)
    except OSError as exc:
        if exc.errno in _GONE:
            return 0
        raise
    with os.fdopen(fd, "rb") as source:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return 0
        if st.st_size > budget:
            raise WorkspaceLimitError(f"{_show(entry.rel)}: workspace archive over its size limit")
        info.size, info.mode = st.st_size, mode
        tar.addfile(info, source)
        return st.st_size


def open_beneath(root: Path, rel: PurePosixPath, flags: int, mode: int = 0o644) -> int:
    """Open `root/rel` refusing symlinks and special files anywhere on the way (ELOOP/ENOTDIR).

    Callers fall back to doing the operation inside the sandbox, where links resolve in the
    sandbox's own view and cannot reach the host.
    """
    dir_fd = os.open(root, _DIR_FLAGS)
    try:
        for part in rel.parts[:-1]:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            os.close(dir_fd)
            dir_fd = next_fd
        fd = os.open(rel.name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(f"{_show(rel)}: not a regular file")
    os.set_blocking(fd, True)
    return fd


def remove_tree(path: Path) -> None:
    """Delete `path` whatever the sandbox left in it: any depth, read-only dirs, links, FIFOs.

    Subdirectories are renamed up into `path` itself before they are emptied, so no walk ever
    goes deeper than one level and no path grows past PATH_MAX.
    """
    try:
        root_fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        os.unlink(path)
        return
    try:
        os.fchmod(root_fd, 0o700)
        serial = itertools.count()
        pending = os.listdir(root_fd)
        while pending:
            name = pending.pop()
            try:
                st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(name, dir_fd=root_fd)
                continue
            os.chmod(name, 0o700, dir_fd=root_fd)  # a directory (lstat above), not a link
            dir_fd = os.open(name, _DIR_FLAGS, dir_fd=root_fd)
            try:
                for child in os.listdir(dir_fd):
                    child_st = os.stat(child, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISDIR(child_st.st_mode):
                        flat = _free_name(root_fd, serial)
                        os.rename(child, flat, src_dir_fd=dir_fd, dst_dir_fd=root_fd)
                        pending.append(flat)
                    else:
                        os.unlink(child, dir_fd=dir_fd)
            finally:
                os.close(dir_fd)
            os.rmdir(name, dir_fd=root_fd)
    finally:
        os.close(root_fd)
    os.rmdir(path)


def _free_name(dir_fd: int, serial: Iterator[int]) -> str:
    while True:
        name = f".rm-{next(serial)}"
        try:
            os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return name


def chown_tree(root: Path, owner: int) -> None:
    """Give everything under `root` (links themselves, not their targets) to uid=gid `owner`."""
    for entry in walk(root):
        os.chown(entry.name, owner, owner, dir_fd=entry.dir_fd, follow_symlinks=False)
