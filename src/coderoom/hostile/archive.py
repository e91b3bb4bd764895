"""Workspace archives, both ways: a tar made from a sandbox's workspace directory, and a tar
from a sandbox (or a run folder) extracted onto the host.

Both treat their input as hostile: it was written by code the model wrote. Archiving reads
with O_NOFOLLOW through `tree.walk`; extraction writes regular files and directories only,
never follows a symlink (in the archive or already in the destination), never leaves the
destination, and is bounded in count and size.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from .names import UnsafePath, rebased_link, safe_relative_path, shown
from .tree import GONE, MAX_ENTRIES, Entry, WorkspaceLimitError, copy_bounded, open_dir_beneath, walk

MAX_FILES = 10_000  # files, and directories, that one extraction writes
MAX_BYTES = 2 * 1024**3
MAX_MEMBERS = MAX_ENTRIES  # members of any kind a tar may hold before reading stops


class ArchiveError(ValueError):
    """A tar archive that is not what it may be: compressed, too many members, or (`one_file`)
    not one regular file within its bound."""


def each_member(tar: tarfile.TarFile, limit: int = MAX_MEMBERS) -> Iterator[tarfile.TarInfo]:
    """The members of `tar`, one at a time, without tarfile's own list of every member seen (it
    would grow with a hostile archive's member count); ArchiveError past `limit` members."""
    for count, member in enumerate(tar, start=1):
        if count > limit:
            raise ArchiveError(f"more than {limit} members (MAX_MEMBERS): not read further")
        tar.members.clear()  # type: ignore[attr-defined]  # TarFile.members: untyped in typeshed
        yield member


_ONE_FILE_SLACK = 64 * 1024  # the tar headers and padding around one file's bytes


def one_file(chunks: Iterable[bytes], max_bytes: int) -> bytes:
    """The bytes of the one regular file in the tar `chunks`, as Docker's archive API sends a
    path of a container (`get_archive`), gathered no further than `max_bytes` allows.

    Why one reader: the container's file is hostile (or the image's build's), so every caller
    needs the same bounds: the stream is read to at most `max_bytes` plus the tar's own
    headers and padding, the archive is uncompressed, it holds exactly one member, that member
    is a regular file (not a link, a device, a directory), and it is at most `max_bytes`.
    ArchiveError (a ValueError) says which of these failed."""
    bound = max_bytes + _ONE_FILE_SLACK
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > bound:
            raise ArchiveError(f"over {max_bytes} bytes: not read further")
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(data)), mode="r:") as tar:
            member = tar.next()
            if member is None or tar.next() is not None:
                raise ArchiveError("not an archive of exactly one file")
            if not member.isreg():
                raise ArchiveError("its one member is not a regular file")
            if member.size > max_bytes:
                raise ArchiveError(f"over {max_bytes} bytes")
            handle = tar.extractfile(member)
            content = handle.read(max_bytes + 1) if handle is not None else b""
    except (tarfile.TarError, OSError, EOFError):
        raise ArchiveError("an archive that does not read as an uncompressed tar") from None
    if len(content) != member.size:
        raise ArchiveError("an archive cut short")
    return content


def open_plain(archive: IO[bytes] | Path) -> tarfile.TarFile:
    """A workspace tar as coderoom writes it: uncompressed. A compressed one is refused, since
    its size on disk says nothing of what it holds (an xz of a million empty members is a few KB)."""
    try:
        if isinstance(archive, Path):
            return tarfile.open(archive, mode="r:")
        return tarfile.open(fileobj=archive, mode="r|")
    except tarfile.ReadError as exc:
        raise ArchiveError(f"not an uncompressed tar archive ({exc})") from None


@dataclass
class ExtractReport:
    extracted: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    bytes_written: int = 0
    directories: int = 0
    refused_dirs: set[str] = field(default_factory=set, repr=False)  # by `refuse`: contents not listed


def _write_member(root_fd: int, rel: PurePosixPath, source: IO[bytes], budget: int) -> int:
    parent_fd = open_dir_beneath(root_fd, rel.parts[:-1], create=True)
    try:
        try:
            os.unlink(rel.name, dir_fd=parent_fd)  # replace a file or a planted symlink, never follow
        except FileNotFoundError:
            pass
        fd = os.open(
            rel.name,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
            0o644,
            dir_fd=parent_fd,
        )
        with os.fdopen(fd, "wb") as out:
            written = copy_bounded(source, out, budget)
        return written
    finally:
        os.close(parent_fd)


def safe_extract_tar(
    archive: IO[bytes] | Path,
    dest: Path,
    *,
    members: Iterable[str] | None = None,
    max_files: int = MAX_FILES,
    max_bytes: int = MAX_BYTES,
    refuse: Callable[[PurePosixPath], str | None] | None = None,
) -> ExtractReport:
    """Extract regular files and directories from a workspace tar into `dest`.

    `members`, when given, limits extraction to those workspace-relative paths (and the
    contents of those directories). `refuse`, when given, is asked about every name: a reason
    skips it (a directory with everything beneath it, listed once). Anything else that is
    unsafe is skipped and listed in `report.refused` with the reason; nothing is ever written
    outside `dest`.
    """
    wanted = {str(safe_relative_path(m)) for m in members} if members is not None else None
    dest.mkdir(parents=True, exist_ok=True)
    report = ExtractReport()
    root_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with open_plain(archive) as tar:
            for member in each_member(tar):
                _extract_one(tar, member, root_fd, wanted, refuse, report, max_files, max_bytes)
    finally:
        os.close(root_fd)
    return report


def extract_into_sandbox(archive: IO[bytes] | Path, dest: Path, *, max_bytes: int) -> ExtractReport:
    """Extract a tar on its way INTO a sandbox: a workspace being hydrated, a job's inputs on a
    Ray node. That is no exit (nothing lands where a host tool looks), so the exit policy of
    `hostile.exits` does not apply; the hardened extraction does (nothing outside `dest`, bounded).
    The one other caller of `safe_extract_tar`, so that every extraction is one of the two."""
    return safe_extract_tar(archive, dest, max_bytes=max_bytes)


def _extract_one(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    root_fd: int,
    wanted: set[str] | None,
    refuse: Callable[[PurePosixPath], str | None] | None,
    report: ExtractReport,
    max_files: int,
    max_bytes: int,
) -> None:
    if member.name in (".", "./") and member.isdir():
        return  # the archive's own root entry
    try:
        rel = safe_relative_path(member.name)
    except UnsafePath as exc:
        report.refused.append((member.name, str(exc)))
        return
    name = str(rel)
    if wanted is not None and not any(name == w or name.startswith(w + "/") for w in wanted):
        return
    if refuse is not None and (reason := refuse(rel)) is not None:
        if not any(str(parent) in report.refused_dirs for parent in rel.parents):
            report.refused.append((name, reason))
        if member.isdir():
            report.refused_dirs.add(name)
        return
    if member.isdir():
        if report.directories >= max_files:
            report.refused.append((name, f"more than {max_files} directories"))
            return
        report.directories += 1
        try:
            os.close(open_dir_beneath(root_fd, rel.parts, create=True))
        except OSError as exc:
            report.refused.append((name, f"directory: {exc.strerror}"))
        return
    if not member.isreg():
        kind = "symlink" if member.issym() else "hard link" if member.islnk() else "special file"
        report.refused.append((name, f"{kind} not extracted"))
        return
    if len(report.extracted) >= max_files:
        report.refused.append((name, f"more than {max_files} files"))
        return
    if report.bytes_written + member.size > max_bytes:
        report.refused.append((name, f"total size over {max_bytes} bytes"))
        return
    source = tar.extractfile(member)
    if source is None:
        report.refused.append((name, "unreadable member"))
        return
    try:
        report.bytes_written += _write_member(
            root_fd, rel, source, max_bytes - report.bytes_written
        )
        report.extracted.append(name)
    except (OSError, OverflowError) as exc:
        report.refused.append((name, f"not written: {exc}"))



def archive(
    root: Path,
    *,
    skip: set[PurePosixPath],
    max_bytes: int,
    max_entries: int = MAX_ENTRIES,
    snapshot_root: str | None = None,
) -> io.BufferedRandom:
    """A tar of the workspace with relative names: dirs, regular files, symlinks kept as links.

    FIFOs, sockets and devices are left out; files are opened O_NOFOLLOW|O_NONBLOCK and checked
    to be regular after opening. Modes are normalised (no setuid/setgid/sticky).

    With `snapshot_root` (the sandbox's workspace path: a snapshot for `hydrate_workspace`), the
    tar is exact: a file's second name is a hard link to its first, and an absolute symlink under
    that root becomes relative (`names.rebased_link`), so a restore can take it. Without it (the
    run's workspace.tar), every name is a file of its own, which `safe_extract_tar` takes.
    """
    out = tempfile.TemporaryFile()
    total = 0
    first_names: dict[tuple[int, int], str] = {}
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
                    if exc.errno in GONE:
                        continue
                    raise
                if snapshot_root is not None:
                    info.linkname = rebased_link(info.linkname, entry.rel, snapshot_root)
                info.type, info.mode = tarfile.SYMTYPE, 0o777
                tar.addfile(info)
            elif stat.S_ISREG(entry.st.st_mode):
                inode = (entry.st.st_dev, entry.st.st_ino)
                if snapshot_root is not None and inode in first_names:
                    info.type, info.linkname, info.mode = tarfile.LNKTYPE, first_names[inode], mode
                    tar.addfile(info)
                    continue
                added = _add_file(tar, info, entry, mode, max_bytes - total)
                if added is not None and snapshot_root is not None and entry.st.st_nlink > 1:
                    first_names[inode] = info.name
                total += added or 0
    out.seek(0)
    return out


def _add_file(tar: tarfile.TarFile, info: tarfile.TarInfo, entry: Entry, mode: int, budget: int) -> int | None:
    """The bytes added; None when the entry is gone or is no longer the file that was listed."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(entry.name, flags, dir_fd=entry.dir_fd)
    except OSError as exc:
        if exc.errno in GONE:
            return None
        raise
    with os.fdopen(fd, "rb") as source:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (entry.st.st_dev, entry.st.st_ino):
            return None
        if st.st_size > budget:
            raise WorkspaceLimitError(f"{shown(entry.rel)}: workspace archive over its size limit")
        info.size, info.mode = st.st_size, mode
        tar.addfile(info, source)
        return st.st_size


