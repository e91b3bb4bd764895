"""Host-side handling of a sandbox workspace directory, which is hostile.

Everything here walks with directory fds and O_NOFOLLOW, iteratively (a 1100-level tree makes
`shutil.rmtree`, `copytree` and `tarfile.add` raise RecursionError on 3.11: catalogue ART-06),
never opens a FIFO or device for reading, and never follows a symlink the sandbox planted.
Sandbox processes may change the tree during a walk (the workspace watchdog runs beside a
command; a long-lived process such as the run_python kernel may run at any time): an entry that
vanishes or turns into a link between listing and opening is skipped, and nothing is followed.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from .names import shown

MAX_DEPTH = 256
MAX_ENTRIES = 100_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1024 * 1024
REMOVE_RETRIES = 100  # directories found non-empty again after they were emptied (a refilling process)
_PATH_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# an entry removed or replaced (by a link, a file) between listing and opening: a live process
# (a command, while the watchdog walks; the run_python kernel, at any time) changed the tree
GONE = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EINVAL}  # EINVAL: readlink of a non-link


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
                    raise WorkspaceLimitError(f"{shown(entry.rel)}: deeper than {max_depth} levels")
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError as exc:
                    if exc.errno in GONE:
                        continue
                    raise
                stack.append((child, entry.rel, iter(sorted(os.listdir(child)))))
    finally:
        for dir_fd, _, _ in stack:
            os.close(dir_fd)


def count_entries(root: Path, *, max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH) -> int:
    """How many entries `root` holds, raising past `max_entries` or `max_depth`: the cheap half
    of `usage`. Directory types come from getdents (d_type), so no entry is stat'ed unless the
    filesystem leaves its type unknown: for 100,000 files about 30 ms where `usage` takes 400, so a
    watchdog can look for a file-creating loop every poll and keep the full walk for sizes."""
    count = 0
    # one open listing per level being walked (as `walk`), never one per directory seen: a
    # folder of a few thousand empty directories would otherwise exhaust RLIMIT_NOFILE (EMFILE)
    stack: list[tuple[int, Iterator[os.DirEntry[str]]]] = []
    _enter(stack, os.open(root, _DIR_FLAGS))
    try:
        while stack:
            dir_fd, listing = stack[-1]
            item = next(listing, None)
            if item is None:
                _leave(stack.pop())
                continue
            count += 1
            if count > max_entries:
                raise WorkspaceLimitError(f"more than {max_entries} entries")
            try:
                if not item.is_dir(follow_symlinks=False):
                    continue
                child = os.open(item.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in GONE:
                    continue
                raise
            if len(stack) >= max_depth:
                os.close(child)
                raise WorkspaceLimitError(f"deeper than {max_depth} levels")
            _enter(stack, child)
    finally:
        for level in stack:
            _leave(level)
    return count


def _enter(stack: list[tuple[int, Iterator[os.DirEntry[str]]]], dir_fd: int) -> None:
    """Push `dir_fd` (owned from now on) with its listing."""
    try:
        stack.append((dir_fd, os.scandir(dir_fd)))
    except BaseException:
        os.close(dir_fd)
        raise


def _leave(level: tuple[int, Iterator[os.DirEntry[str]]]) -> None:
    dir_fd, listing = level
    listing.close()  # type: ignore[attr-defined]
    os.close(dir_fd)


def usage(root: Path, *, max_entries: int = MAX_ENTRIES) -> int:
    """Bytes in `root`, each entry counted by the larger of its apparent size (st_size: a sparse
    file counts in full, as it would archived) and its allocated blocks (st_blocks: space reserved
    beyond the size counts too); raises past the limits."""
    total = 0
    for count, entry in enumerate(walk(root), start=1):
        if count > max_entries:
            raise WorkspaceLimitError(f"more than {max_entries} entries")
        total += footprint(entry.st)
    return total


def footprint(st: os.stat_result) -> int:
    """What a file costs: the larger of its apparent size and the disk blocks it holds."""
    return max(st.st_size, st.st_blocks * 512)


def open_dir_beneath(
    root: Path | int, parts: Iterable[str], *, create: bool = False, owner: int | None = None
) -> int:
    """Open the directory `root/parts...`, refusing a symlink or non-directory at every step.

    With `create`, missing directories are made (mode 0755) and, if `owner` is given, handed to
    uid=gid `owner` (the sandbox's host uid, when the host runs as root). The one O_NOFOLLOW
    descent every host-side write, read and extraction goes through.
    """
    fd = os.open(root, _DIR_FLAGS) if isinstance(root, Path) else os.dup(root)
    try:
        for part in parts:
            created = False
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    created = True
                except FileExistsError:
                    pass
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
            if created and owner is not None:
                os.fchown(fd, owner, owner)
        return fd
    except BaseException:
        os.close(fd)
        raise


def mkdir_beneath(root: Path, rel: PurePosixPath, *, parents: bool, owner: int | None) -> None:
    """`mkdir [-p] root/rel` without following symlinks (ELOOP/ENOTDIR: callers fall back)."""
    if parents:
        os.close(open_dir_beneath(root, rel.parts, create=True, owner=owner))
        return
    parent_fd = open_dir_beneath(root, rel.parts[:-1])
    try:
        os.mkdir(rel.name, 0o755, dir_fd=parent_fd)
        if owner is not None:
            os.chown(rel.name, owner, owner, dir_fd=parent_fd, follow_symlinks=False)
    finally:
        os.close(parent_fd)


def open_beneath(root: Path | int, rel: PurePosixPath, flags: int, mode: int = 0o644) -> int:
    """Open the regular file `root/rel`, refusing symlinks and special files anywhere on the way.

    `root` may be a directory fd held open (then no path above it is walked again). Callers fall back to doing the operation inside the sandbox, where links resolve in the
    sandbox's own view and cannot reach the host.
    """
    dir_fd = open_dir_beneath(root, rel.parts[:-1])
    try:
        fd = os.open(rel.name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(f"{shown(rel)}: not a regular file")
    os.set_blocking(fd, True)
    return fd


def copy_bounded(source: IO[bytes], out: IO[bytes], max_bytes: int) -> int:
    """Copy `source` to `out` in chunks; raise OverflowError as soon as `max_bytes` is passed.

    Nothing larger than the budget is ever held or written: the check comes before each write.
    """
    written = 0
    while chunk := source.read(_CHUNK):
        written += len(chunk)
        if written > max_bytes:
            raise OverflowError(f"more than {max_bytes} bytes")
        out.write(chunk)
    return written


def remove_tree(path: Path) -> None:
    """Delete `path` whatever the sandbox left in it: any depth, read-only dirs, links, FIFOs.

    Run as root over folders uid 65534 can write (prune, session close), so no step acts on a
    name that could have become a link since it was looked at: each directory is opened with
    O_NOFOLLOW relative to its parent's fd and its mode changed through that fd (a link in its
    place fails the open with ENOTDIR and is unlinked itself), entries go by `unlinkat`, which
    never follows, and a directory found by `unlinkat`'s EISDIR is moved by `renameat`, which
    never follows either. Subdirectories are renamed up into `path` itself before they are
    emptied, so no walk ever goes deeper than one level and no path grows past PATH_MAX. A
    process that keeps refilling the tree makes it raise OSError after REMOVE_RETRIES tries.
    Nothing on another mount than `path`'s parent is touched (a mount point in the tree, or
    `path` itself one, raises OSError EXDEV before its mode or entries change): a bind mount
    left in a folder would otherwise have had the host folder it shows emptied (attack R-F11).
    """
    try:
        parent_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the caller's, trusted
    except FileNotFoundError:
        return
    try:
        mount = _mount_of(parent_fd)
        try:
            root_fd = _open_to_empty(path.name, parent_fd, mount)
        except FileNotFoundError:
            return
        except NotADirectoryError:
            os.unlink(path.name, dir_fd=parent_fd)
            return
        try:
            _empty(root_fd, mount)
        finally:
            os.close(root_fd)
        os.rmdir(path.name, dir_fd=parent_fd)
    finally:
        os.close(parent_fd)


def _mount_of(fd: int) -> int:
    """The id of the mount `fd` is on (the kernel's `mnt_id`: a bind mount of the same file
    system has the same st_dev, not the same mount)."""
    with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as info:
        for line in info:
            if line.startswith("mnt_id:"):
                return int(line.split()[1])
    raise OSError(errno.ENOTSUP, "the kernel gives no mount id")


def _same_mount(fd: int, mount: int, name: str) -> None:
    """Raise EXDEV unless the directory `fd` (named `name`) is on `mount`: never empty a mount point."""
    if _mount_of(fd) != mount:
        raise OSError(errno.EXDEV, f"{shown(name)} is a mount point: left as it is")


def _open_to_empty(name: str, parent_fd: int, mount: int) -> int:
    """Open the directory `name` in `parent_fd` without following a link, and give it mode 0700
    through the open fd (never by name). ENOTDIR: not a directory (a link, a file) any more.
    EXDEV: a mount point (not on `mount`), left as it is."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except PermissionError:  # not root, and the sandbox took the read bit away: fix it through an O_PATH fd
        path_fd = os.open(name, _PATH_DIR_FLAGS, dir_fd=parent_fd)
        try:
            _same_mount(path_fd, mount, name)
            os.chmod(f"/proc/self/fd/{path_fd}", 0o700)  # that inode itself: a magic link, no name lookup
            fd = os.open(".", _DIR_FLAGS, dir_fd=path_fd)
        finally:
            os.close(path_fd)
    try:
        _same_mount(fd, mount, name)
        os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _empty(root_fd: int, mount: int) -> None:
    """Remove everything in the directory `root_fd` (on `mount`), flattening subdirectories into it."""
    serial = itertools.count()
    pending = os.listdir(root_fd)
    retries = 0

    def again(name: str) -> None:
        """`name` changed under us (refilled, or swapped between a directory and a link): later."""
        nonlocal retries
        retries += 1
        if retries > REMOVE_RETRIES:
            raise OSError(errno.ENOTEMPTY, "the tree kept changing while it was removed")
        pending.append(name)

    while pending:
        name = pending.pop()
        try:
            dir_fd = _open_to_empty(name, root_fd, mount)
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            if _unlink(name, root_fd) == errno.EISDIR:  # a directory again
                again(name)
            continue
        try:
            for child in os.listdir(dir_fd):
                if _unlink(child, dir_fd) == errno.EISDIR:
                    with contextlib.suppress(OSError):  # moving a directory needs its write bit (not as root)
                        os.close(_open_to_empty(child, dir_fd, mount))
                    flat = _free_name(root_fd, serial)
                    try:
                        os.rename(child, flat, src_dir_fd=dir_fd, dst_dir_fd=root_fd)
                    except FileNotFoundError:
                        continue
                    pending.append(flat)
        finally:
            os.close(dir_fd)
        try:
            os.rmdir(name, dir_fd=root_fd)
        except FileNotFoundError:
            pass
        except NotADirectoryError:  # replaced by a link or file since it was emptied
            again(name)
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise
            again(name)


def _unlink(name: str, dir_fd: int) -> int:
    """`unlinkat` (never follows a link); EISDIR (a directory: the caller moves it) or 0."""
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        return errno.EISDIR
    return 0


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
