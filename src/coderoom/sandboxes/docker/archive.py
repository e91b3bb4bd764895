"""The host end of the docker workspace archive, both ways, as bounded streams.

Out: inside/archiver.py writes a tar in the container; its bytes arrive as channel replies and go
through `ArchiveStream` (a pipe with a byte budget: past it, further data is dropped and the
reader fails at once) into `rewrite`, which parses them as hostile and writes the one host temp
file, holding only directories, regular files and symlinks with clean names and modes, at most
`max_bytes` of file content. The raw stream never touches the host disk.

In: `clean_members` reads a tar from the host (also hostile: it may be a previous run's
archive) and yields what may be unpacked into the workspace, bounded in count and size.
"""

from __future__ import annotations

import io
import posixpath
import queue
import tarfile
import tempfile
from pathlib import PurePosixPath
from collections.abc import Iterator
from typing import IO

from ...errors import SandboxFailed, SandboxLimitExceeded
from ...hostile.names import UnsafePath, rebased_link, safe_relative_path, shown

MAX_ENTRIES = 100_000
# tar framing per entry at most: a header, a PAX header with a PATH_MAX name and link, padding
STREAM_OVERHEAD_PER_ENTRY = 12 * 1024


def stream_budget(max_bytes: int, max_entries: int = MAX_ENTRIES) -> int:
    """The most raw tar bytes an archive within `max_bytes` and `max_entries` can take."""
    return max_bytes + max_entries * STREAM_OVERHEAD_PER_ENTRY + 2 * tarfile.RECORDSIZE


class ArchiveStream(io.RawIOBase):
    """Bytes fed by one thread (the channel reader), read by another (`rewrite`)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.received = 0
        self.error: str | None = None
        self._chunks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._pending = memoryview(b"")
        self._ended = False

    def feed(self, data: bytes) -> bool:
        """Queue `data` (dropped, but counted, once the reader closed); False once the budget is
        passed or the stream failed."""
        if self.error is not None:
            return False
        self.received += len(data)
        if self.received > self.budget:
            self.fail(f"the archive stream passed its {self.budget} byte limit")
            return False
        if not self.closed:
            self._chunks.put(data)
        return True

    def end(self) -> None:
        self._chunks.put(None)

    def fail(self, reason: str) -> None:
        if self.error is None:
            self.error = reason
        self._chunks.put(None)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            if self._ended:
                return 0
            chunk = self._chunks.get()
            if self.error is not None:
                raise SandboxLimitExceeded(f"workspace archive refused: {self.error}")
            if chunk is None:
                self._ended = True
                return 0
            self._pending = memoryview(chunk)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def rewrite(
    raw: IO[bytes], max_bytes: int, max_entries: int = MAX_ENTRIES, *, snapshot_root: str | None = None
) -> IO[bytes]:
    """A clean tar (host temp file) of `raw`'s directories, regular files and symlinks; with
    `snapshot_root` (a snapshot), also hard links to an earlier regular file, and absolute
    symlinks under that root made relative (`names.rebased_link`)."""
    out = tempfile.TemporaryFile()
    total = 0
    files: set[str] = set()
    try:
        with tarfile.open(fileobj=raw, mode="r|") as src, tarfile.open(
            fileobj=out, mode="w", format=tarfile.PAX_FORMAT
        ) as dst:
            for count, member in enumerate(src, start=1):
                if count > max_entries:
                    raise SandboxLimitExceeded(f"workspace archive over its {max_entries} entry limit")
                try:
                    member.name = str(safe_relative_path(member.name))
                except UnsafePath as e:
                    raise SandboxFailed(f"the sandbox's archive has an unsafe member: {e}") from None
                member.uid = member.gid = 0
                member.uname = member.gname = ""
                member.mode &= 0o777
                if member.isdir():
                    member.mode |= 0o700
                    dst.addfile(member)
                elif member.issym():
                    if snapshot_root is not None:
                        member.linkname = rebased_link(member.linkname, PurePosixPath(member.name), snapshot_root)
                    dst.addfile(member)
                elif member.islnk() and snapshot_root is not None and member.linkname in files:
                    dst.addfile(member)
                elif member.isreg():
                    files.add(member.name)
                    total += member.size
                    if total > max_bytes:
                        raise SandboxLimitExceeded(
                            f"workspace archive refused: {shown(member.name)} takes it past the "
                            f"workspace_size limit of {max_bytes} bytes"
                        )
                    dst.addfile(member, src.extractfile(member))
    except tarfile.TarError as e:
        out.close()
        raise SandboxFailed(f"the sandbox's archive is not a readable tar: {e}") from None
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def clean_members(
    tar: IO[bytes], max_bytes: int, max_entries: int = MAX_ENTRIES
) -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
    """The members of `tar` that may be unpacked into a workspace, each with its data stream
    (regular files) or None: directories, regular files, and symlinks whose target stays inside.
    Names are normalised; anything else, or anything beneath a symlink, is skipped."""
    links: set[str] = set()
    total = 0
    with tarfile.open(fileobj=tar, mode="r|*") as src:
        for count, member in enumerate(src, start=1):
            if count > max_entries:
                raise SandboxLimitExceeded(f"the archive to unpack has more than {max_entries} entries")
            try:
                name = str(safe_relative_path(member.name))
            except UnsafePath:
                continue
            if any(name == link or name.startswith(link + "/") for link in links):
                continue
            member.name = name
            member.mode = (member.mode & 0o777) | (0o700 if member.isdir() else 0o600)
            if member.isdir():
                yield member, None
            elif member.issym():
                target = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
                if member.linkname.startswith("/") or target == ".." or target.startswith("../"):
                    continue
                links.add(name)
                yield member, None
            elif member.isreg():
                total += member.size
                if total > max_bytes:
                    raise SandboxLimitExceeded(
                        f"the archive to unpack is over the workspace_size limit of {max_bytes} bytes"
                    )
                yield member, src.extractfile(member)
