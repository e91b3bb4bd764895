"""Workspace snapshots (the SDK's `persist_workspace` / `hydrate_workspace` tars): checked whole,
then restored exactly.

A snapshot is hostile data: a previous session's sandbox wrote what is in it, and whoever holds
the serialized state chooses the bytes. `check` reads every header before anything is written
(the SDK's rule too: a refused snapshot must not cost the live workspace anything) and returns
the members to restore; each refusal names the member and the reason, as the SDK's
`UnsafeTarMemberError` does, so the adapters raise the SDK's WorkspaceArchiveWriteError with the
same `reason` and `member` context.

Restored: directories, regular files, hard links to an earlier regular file of the snapshot, and
symlinks whose target stays inside the workspace (relative, never above the root), with their
permission bits (owner read/write kept, group/other write dropped, as the SDK's extractor does).
Refused: absolute or escaping symlinks, absolute names and `..`, devices, FIFOs, setuid/setgid
bits, members beneath a symlink or a file, duplicate names, more than MAX_SNAPSHOT_MEMBERS
members, files adding up past the caller's byte limit, more than MAX_PATH_COMPONENTS path
components in all (names' depth summed: what checking and restoring cost, AP-S2), any header
whose data tarfile reads whole (PAX x/X, GNU L/K, any type but a regular file's) over
MAX_HEADER_DATA, PAX headers with ill-formed or repeated records or GNU sparse keywords,
compressed, truncated or non-tar input, and a snapshot file longer than the byte limit plus framing. The raw headers are scanned first (checksums, sizes,
the end-of-archive marker), so a header claiming a terabyte or a million members costs a scan of
headers, never a read of data or tarfile's member list.

`restore` writes onto the host with directory fds and O_NOFOLLOW at every step (nothing is ever
extracted through a symlink, not even one a live sandbox process just planted), creates files
with O_EXCL, gives every entry to the explicit `owner` and makes symlinks last.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import re
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Literal, cast

from .archive import ArchiveError, each_member
from .names import UnsafePath, has_windows_separator, safe_relative_path, shown
from .tree import MAX_DEPTH, MAX_ENTRIES, copy_bounded, open_dir_beneath

MAX_SNAPSHOT_MEMBERS = MAX_ENTRIES  # members of any kind; the archivers stop at the same count
MAX_HEADER_DATA = 1024**2  # bytes of one PAX or GNU long-name header, which tarfile reads whole
MAX_PATH_COMPONENTS = 2_000_000  # names' depths summed over a snapshot (100,000 members 20 deep)
MAX_PLAIN_NAME = 200  # characters of a name a reason repeats as it is (longer ones are cut)
FRAMING_PER_MEMBER = 12 * 1024  # tar framing of one member at most (headers, long names, padding)
_BLOCK = tarfile.BLOCKSIZE
_FILE_TYPES = frozenset(b"0\x007")  # regular files: data read on demand, never whole
_NO_DATA_TYPES = frozenset(b"123456")  # links, devices, directories, FIFOs: no data, whatever size says
_PREFIX_TYPES = frozenset(b"xXLK")  # PAX (x, Solaris X) and GNU long name/link (L, K): for the next member
_PAX_TYPES = frozenset(b"xX")  # tarfile reads both as a PAX extended header
_PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")  # tarfile's own record pattern
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"))
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Kind = Literal["dir", "file", "symlink", "hardlink"]


class SnapshotRefused(ArchiveError):
    """A snapshot (or one member of it) that is not restored; `member` and `reason` say which
    and why ("<tar>" for the archive as a whole)."""

    def __init__(self, member: str, reason: str) -> None:
        where = "snapshot" if member == "<tar>" else f"snapshot member {shown(member)}"
        super().__init__(f"{where} refused: {reason}")
        self.member = member
        self.reason = reason


@dataclass(frozen=True)
class Member:
    rel: PurePosixPath
    kind: Kind
    mode: int  # permission bits as restored
    size: int = 0  # file content bytes
    target: str = ""  # a symlink's target; a hard link's first name
    offset: int = 0  # where a file's content starts in the snapshot

    def tarinfo(self) -> tarfile.TarInfo:
        """A clean header for this member (no owner, no times beyond now's default)."""
        info = tarfile.TarInfo(str(self.rel))
        info.mode, info.size = self.mode, self.size
        info.type = {"dir": tarfile.DIRTYPE, "file": tarfile.REGTYPE, "symlink": tarfile.SYMTYPE,
                     "hardlink": tarfile.LNKTYPE}[self.kind]  # fmt: skip
        info.linkname = self.target
        return info


@dataclass
class Snapshot:
    """A checked snapshot: its members in restore order (symlinks last) over a seekable copy."""

    members: list[Member]
    source: IO[bytes]
    owned: bool = True  # a spooled copy, closed with the snapshot; else the caller's stream

    def data(self, member: Member) -> IO[bytes]:
        """A regular file member's content, exactly `member.size` bytes."""
        return cast(IO[bytes], _Slice(self.source, member.offset, member.size))  # a binary reader

    def close(self) -> None:
        if self.owned:
            self.source.close()


def restored_mode(mode: int, kind: Kind) -> int:
    """Permission bits to restore: group/other write dropped, the owner always able to read and
    write (and enter a directory); execute bits of a file only when the owner had them (the
    SDK's extractor, after the standard library's `data` filter)."""
    if kind == "dir":
        return (mode & 0o755) | 0o700
    kept = mode & 0o755
    if not kept & 0o100:
        kept &= ~0o111
    return kept | 0o600


def check(data: IO[bytes], *, max_bytes: int, max_members: int = MAX_SNAPSHOT_MEMBERS) -> Snapshot:
    """The members of snapshot `data`, all checked (SnapshotRefused on the first that is not
    restorable); `max_bytes` bounds the files' total size and, with framing, the input."""
    owned = not _at_start(data)
    budget = max_bytes + max_members * FRAMING_PER_MEMBER + 2 * tarfile.RECORDSIZE
    source = _spooled(data, budget) if owned else data
    if not owned and data.seek(0, os.SEEK_END) > budget:  # a snapshot file read in place (AP-S1)
        raise SnapshotRefused("<tar>", f"over {budget} bytes (the workspace_size limit plus tar framing)")
    try:
        _scan_headers(source, max_members)
        source.seek(0)
        members = _members(source, max_bytes, max_members)
        source.seek(0)
    except BaseException:
        if owned:
            source.close()
        raise
    ordered = [m for m in members if m.kind != "symlink"] + [m for m in members if m.kind == "symlink"]
    return Snapshot(ordered, source, owned)


def _at_start(data: IO[bytes]) -> bool:
    """Whether `data` can be read in place: seekable and at its start (a snapshot file)."""
    try:
        return data.seekable() and data.tell() == 0
    except (AttributeError, OSError, ValueError):
        return False


def _spooled(data: IO[bytes], budget: int) -> IO[bytes]:
    """A seekable copy of a stream (at most `budget` bytes), read from its current position."""
    out = tempfile.TemporaryFile()
    try:
        copy_bounded(data, out, budget)
    except OverflowError:
        out.close()
        raise SnapshotRefused("<tar>", f"over {budget} bytes (the workspace_size limit plus tar framing)") from None
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def _header_size(block: bytes) -> int:
    field = block[124:136]
    if field[0] & 0x80:  # GNU base-256
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip()
    return int(text, 8) if text else 0


def _checksum_ok(block: bytes) -> bool:
    try:
        recorded = int(block[148:156].split(b"\0", 1)[0].strip() or b"-1", 8)
    except ValueError:
        return False
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    return recorded == unsigned


def _scan_headers(source: IO[bytes], max_members: int) -> None:
    """Walk the raw 512-byte headers: each with a valid checksum, no metadata header over
    MAX_HEADER_DATA, no data past the end of the input, at most `max_members` members, and the
    end-of-archive marker present (else the snapshot was cut)."""
    length = source.seek(0, os.SEEK_END)
    source.seek(0)
    magic = source.read(6)
    for prefix, name in _COMPRESSED:
        if magic.startswith(prefix):
            raise SnapshotRefused("<tar>", f"not an uncompressed tar archive ({name}-compressed)")
    offset, count, pax_size = 0, 0, None
    while True:
        source.seek(offset)
        block = source.read(_BLOCK)
        if len(block) < _BLOCK and offset == 0:
            raise SnapshotRefused("<tar>", "not an uncompressed tar archive (shorter than one header)")
        if len(block) < _BLOCK:
            raise SnapshotRefused("<tar>", "truncated: it ends without the end-of-archive marker")
        if block == bytes(_BLOCK):
            return
        if not _checksum_ok(block):
            reason = "not an uncompressed tar archive" if offset == 0 else f"a damaged header at byte {offset}"
            raise SnapshotRefused("<tar>", reason)
        try:
            size = _header_size(block)
        except ValueError:
            raise SnapshotRefused("<tar>", f"a header with an invalid size at byte {offset}") from None
        kind = block[156]
        if kind == ord("S"):
            raise SnapshotRefused("<tar>", "a GNU sparse member (coderoom's snapshots hold none)")
        if kind == ord("g"):
            raise SnapshotRefused("<tar>", "a global PAX header (no workspace archiver writes one)")
        if kind not in _FILE_TYPES and kind not in _NO_DATA_TYPES and size > MAX_HEADER_DATA:
            raise SnapshotRefused("<tar>", f"a {size} byte metadata header (MAX_HEADER_DATA is {MAX_HEADER_DATA})")
        if kind in _PREFIX_TYPES:
            if kind in _PAX_TYPES:
                pax_size = _pax_size(source.read(size))
        else:
            count += 1
            if count > max_members:
                raise SnapshotRefused("<tar>", f"more than {max_members} members (MAX_SNAPSHOT_MEMBERS)")
            size, pax_size = (size if pax_size is None else pax_size), None  # PAX size wins, as in tarfile
        if kind in _NO_DATA_TYPES:
            size = 0
        offset += _BLOCK + -(-size // _BLOCK) * _BLOCK
        if offset > length:
            raise SnapshotRefused("<tar>", f"truncated: a member claims {size} bytes past the end of the snapshot")


def _pax_size(payload: bytes) -> int | None:
    """The `size` record of a PAX extended header, read as tarfile reads it: length-prefixed
    records ("LEN keyword=value\n", LEN counting the whole record). Anything tarfile could read
    differently from this scan is refused (AP-S1b): a record whose length does not end it at a
    newline, bytes after the last record, a keyword given twice (tarfile keeps the last), GNU
    sparse keywords (tarfile then reads a sparse map from the data)."""
    seen: set[bytes] = set()
    size: int | None = None
    pos = 0
    while pos < len(payload):
        match = _PAX_RECORD.match(payload, pos)
        length = int(match.group(1)) if match else 0
        end = pos + length
        if match is None or match.end() > end or end > len(payload) or payload[end - 1 : end] != b"\n":
            raise SnapshotRefused("<tar>", "a PAX header with an ill-formed record")
        keyword = match.group(2)
        if keyword in seen or keyword.startswith(b"GNU.sparse"):
            raise SnapshotRefused("<tar>", f"a PAX header with a repeated or sparse record ({shown(keyword.decode(errors='replace'))})")
        seen.add(keyword)
        if keyword == b"size":
            try:
                size = int(payload[match.end() : end - 1])
            except ValueError:
                raise SnapshotRefused("<tar>", "a PAX header with an invalid size") from None
        pos = end
    return size


def _members(source: IO[bytes], max_bytes: int, max_members: int) -> list[Member]:
    members: list[Member] = []
    kinds: dict[PurePosixPath, Kind] = {}
    parents: set[PurePosixPath] = set()
    total = components = 0
    try:
        with tarfile.open(fileobj=source, mode="r:") as tar:
            for info in each_member(tar, max_members):
                member = _member(info, kinds, parents)
                if member is None:
                    continue
                if member.kind == "file":
                    total += member.size
                    if total > max_bytes:
                        raise SnapshotRefused(
                            info.name, f"the snapshot's files add up past the workspace_size limit of {max_bytes} bytes"
                        )
                components += len(member.rel.parts)
                if components > MAX_PATH_COMPONENTS:
                    raise SnapshotRefused(info.name, f"more than {MAX_PATH_COMPONENTS} path components in all (MAX_PATH_COMPONENTS)")
                kinds[member.rel] = member.kind
                for parent in member.rel.parents:  # an ancestor known already has its ancestors known
                    if parent in parents:
                        break
                    parents.add(parent)
                members.append(member)
    except SnapshotRefused:
        raise
    except ArchiveError as exc:
        raise SnapshotRefused("<tar>", str(exc)) from None
    except (tarfile.TarError, EOFError) as exc:
        raise SnapshotRefused("<tar>", f"not a readable tar archive ({exc})") from None
    return members


def _member(
    info: tarfile.TarInfo, kinds: dict[PurePosixPath, Kind], parents: set[PurePosixPath]
) -> Member | None:
    """One header checked against the SDK's rules and coderoom's; None for the root entry."""
    name = info.name
    if name in ("", ".", "./"):
        if info.isdir():
            return None
        raise SnapshotRefused(name, "the archive root must be a directory")
    if has_windows_separator(name):
        raise SnapshotRefused(name, "windows path separator")
    if name.startswith("/"):
        raise SnapshotRefused(name, "absolute path")
    if ".." in PurePosixPath(name).parts:
        raise SnapshotRefused(name, "parent traversal")
    try:
        rel = safe_relative_path(name)
    except UnsafePath as exc:
        raise SnapshotRefused(name, str(exc)) from None
    if len(rel.parts) > MAX_DEPTH:
        raise SnapshotRefused(name, f"deeper than {MAX_DEPTH} levels (MAX_DEPTH)")
    kind = _kind(info)
    if kind in ("dir", "file") and info.mode & (stat.S_ISUID | stat.S_ISGID):
        raise SnapshotRefused(name, f"setuid/setgid bit (mode {info.mode:o})")
    earlier = kinds.get(rel)
    if earlier is not None and not (earlier == "dir" and kind == "dir"):
        raise SnapshotRefused(name, f"duplicate archive path: {rel}")
    if kind != "dir" and rel in parents:
        raise SnapshotRefused(name, f"a {kind} where earlier members need a directory")
    for parent in rel.parents:
        if parent in parents:  # a directory already, as are its ancestors: the walk stays linear (AP-S2)
            break
        if kinds.get(parent, "dir") != "dir":
            raise SnapshotRefused(name, f"archive path descends through {kinds[parent]}: {parent}")
    if kind == "symlink":
        _check_link_target(info.linkname, rel, name)
        return Member(rel, kind, 0o777, target=info.linkname)
    if kind == "hardlink":
        try:
            target = safe_relative_path(info.linkname)
        except UnsafePath as exc:
            raise SnapshotRefused(name, f"hard link target: {exc}") from None
        if kinds.get(target) != "file":
            raise SnapshotRefused(name, f"hard link target {shown(target)} is not an earlier regular file of the snapshot")
        return Member(rel, kind, 0, target=str(target))
    if kind == "dir":
        return Member(rel, kind, restored_mode(info.mode, kind))
    return Member(rel, kind, restored_mode(info.mode, kind), size=info.size, offset=info.offset_data)


def _kind(info: tarfile.TarInfo) -> Kind:
    if info.isdir():
        return "dir"
    if info.issym():
        return "symlink"
    if info.islnk():
        return "hardlink"
    if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
        return "file"
    what = "character device" if info.ischr() else "block device" if info.isblk() else "FIFO" if info.isfifo() else None
    raise SnapshotRefused(info.name, f"unsupported member type ({what or repr(info.type)}): not restored")


def _check_link_target(target: str, rel: PurePosixPath, name: str) -> None:
    if not target or "\0" in target:
        raise SnapshotRefused(name, "an empty symlink target")
    if target.startswith("/"):
        raise SnapshotRefused(name, f"absolute symlink target not allowed: {_plain(target)}")
    joined = posixpath.normpath(posixpath.join(str(rel.parent), target))
    if joined == ".." or joined.startswith("../"):
        raise SnapshotRefused(name, f"symlink target escapes archive root: {_plain(target)}")


def _plain(text: str) -> str:
    """A snapshot-chosen name in a reason: as it is when short and printable (the SDK's exact
    wording), else quoted, escaped and cut (`names.shown`)."""
    return text if len(text) <= MAX_PLAIN_NAME and text.isprintable() else shown(text)


class _Slice(io.RawIOBase):
    """`size` bytes of `source` from `offset`: the content of one member, read on demand."""

    def __init__(self, source: IO[bytes], offset: int, size: int) -> None:
        self._source, self._pos, self._left = source, offset, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._left <= 0:
            return 0
        self._source.seek(self._pos)
        chunk = self._source.read(min(len(buffer), self._left))
        if not chunk:
            raise SnapshotRefused("<tar>", "truncated: a file's content ends early")
        n = len(chunk)
        buffer[:n] = chunk
        self._pos += n
        self._left -= n
        return n


# ---------------------------------------------------------------------- restoring on the host


def restore(snapshot: Snapshot, dest: Path, *, owner: int | None) -> None:
    """Write `snapshot` into the directory `dest` (the workspace folder), never through a
    symlink, every new entry given to uid=gid `owner` when it is not None (the sandbox's host
    uid, when the host runs as root). A directory's permission bits are set last, deepest first,
    so a read-only directory does not stop its own contents."""
    root_fd = os.open(dest, _DIR_FLAGS)
    try:
        with _OpenDirs(root_fd, owner) as dirs:
            for member in snapshot.members:
                _restore_one(snapshot, member, root_fd, dirs)
        for member in sorted((m for m in snapshot.members if m.kind == "dir"), key=lambda m: -len(m.rel.parts)):
            fd = open_dir_beneath(root_fd, member.rel.parts)
            try:
                os.fchmod(fd, member.mode)
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)


def _restore_one(snapshot: Snapshot, member: Member, root_fd: int, dirs: _OpenDirs) -> None:
    owner = dirs.owner
    parent_fd = dirs.parent(member.rel)
    name = member.rel.name
    if member.kind == "dir":
        _clear(parent_fd, name, member, keep_dir=True)
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            if owner is not None:
                os.chown(name, owner, owner, dir_fd=parent_fd, follow_symlinks=False)
        except FileExistsError:
            pass
        return
    _clear(parent_fd, name, member, keep_dir=False)
    if member.kind == "symlink":
        os.symlink(member.target, name, dir_fd=parent_fd)
        if owner is not None:
            os.chown(name, owner, owner, dir_fd=parent_fd, follow_symlinks=False)
    elif member.kind == "hardlink":
        source = PurePosixPath(member.target)
        with _parent(root_fd, source, owner) as source_fd:
            os.link(source.name, name, src_dir_fd=source_fd, dst_dir_fd=parent_fd, follow_symlinks=False)
    else:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent_fd)
        with os.fdopen(fd, "wb") as out:
            if owner is not None:
                os.fchown(fd, owner, owner)
            copy_bounded(snapshot.data(member), out, member.size)
            out.flush()
            os.fchmod(fd, member.mode)


def _clear(parent_fd: int, name: str, member: Member, *, keep_dir: bool) -> None:
    """Make room for `member`: an entry already there is unlinked, never followed; a directory
    stays for a directory and is refused for anything else (as the SDK's extractor does)."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        if keep_dir:
            return
        raise SnapshotRefused(str(member.rel), f"destination directory already exists: {member.rel}")
    os.unlink(name, dir_fd=parent_fd)


class _parent:
    """The parent directory of `rel` under the root, made as needed, opened without following a
    symlink anywhere (one already in the workspace refuses the member)."""

    def __init__(self, root_fd: int, rel: PurePosixPath, owner: int | None) -> None:
        self._args = (root_fd, rel, owner)
        self._fd = -1

    def __enter__(self) -> int:
        root_fd, rel, owner = self._args
        try:
            self._fd = open_dir_beneath(root_fd, rel.parts[:-1], create=True, owner=owner)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            raise SnapshotRefused(str(rel), f"a symlink or a file on its way in the workspace ({exc.strerror})") from None
        return self._fd

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)


class _OpenDirs:
    """The directories on the way to the last member restored, kept open (AP-S2): a member is
    reached from the deepest one it shares with the last, not from the root, so restoring costs
    the path components that change, not every member's depth. Each step is `open_dir_beneath`
    from an open directory fd (no symlink followed); at most MAX_DEPTH fds are open."""

    def __init__(self, root_fd: int, owner: int | None) -> None:
        self.owner = owner
        self._root = root_fd
        self._names: list[str] = []
        self._fds: list[int] = []

    def __enter__(self) -> _OpenDirs:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_from(0)

    def _close_from(self, depth: int) -> None:
        for fd in self._fds[depth:]:
            os.close(fd)
        del self._names[depth:], self._fds[depth:]

    def parent(self, rel: PurePosixPath) -> int:
        """The open parent directory of `rel` (made as needed); valid until the next call."""
        parts = rel.parts[:-1]
        shared = 0
        while shared < min(len(parts), len(self._names)) and parts[shared] == self._names[shared]:
            shared += 1
        self._close_from(shared)
        for part in parts[shared:]:
            at = self._fds[-1] if self._fds else self._root
            try:
                fd = open_dir_beneath(at, [part], create=True, owner=self.owner)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                raise SnapshotRefused(str(rel), f"a symlink or a file on its way in the workspace ({exc.strerror})") from None
            self._names.append(part)
            self._fds.append(fd)
        return self._fds[-1] if self._fds else self._root


def members_of(snapshot: Snapshot) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
    """Clean headers and content streams, in restore order, for a backend that unpacks inside
    its sandbox (docker)."""
    for member in snapshot.members:
        yield member.tarinfo(), snapshot.data(member) if member.kind == "file" else None
