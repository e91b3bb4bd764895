"""Files a sandbox wrote, from a live session or a run folder: listed, previewed, downloaded, zipped.

Every name comes from the sandbox and is checked (`hostile.names.safe_relative_path`) before use;
a run folder is read with O_NOFOLLOW at every step (`hostile.tree`), so a planted link reaches
nothing outside it. Reads are bounded (named limits below), previews are built on the server
(a CSV as a bounded table, Markdown rendered and sanitised, an image only when its magic bytes say
so) and every file response carries `FILE_CSP`, nosniff and, but for a checked image,
`Content-Disposition: attachment`.

Every file leaves through the exit policy (`hostile.exits`), judged on the whole listing: a
planted `.git/`, repository under another name, hook, special file or link is neither listed as
a file, previewed, downloaded nor zipped; the listing's `left_out` and the zip's
`coderoom-left-out.txt` say what was kept in and why.
"""

from __future__ import annotations

import asyncio
import builtins
import os
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol
from urllib.parse import quote

from starlette.responses import JSONResponse, Response, StreamingResponse

from ..errors import NoSuchFile, ReadTooLarge
from ..hostile.exits import (
    LEFT_OUT_NOTE,
    ExitEntry,
    ExitPolicy,
    exit_policy,
    folder_entries,
    left_out_note,
    refuse_leaving,
)
from ..hostile.markup import markdown_html
from ..hostile.names import UnsafePath, portable_path, safe_relative_path
from ..hostile.preview import as_text, csv_table, image_type
from ..hostile.text import terminal_safe
from ..hostile.tree import open_beneath
from .headers import FILE_CSP

MAX_LISTED_FILES = 2_000
MAX_PREVIEW_BYTES = 2 * 1024**2
"""Of a file read for its preview: a CSV's first rows, a report, the start of a text."""
MAX_PREVIEW_TEXT_CHARS = 100_000
MAX_DOWNLOAD_BYTES = 256 * 1024**2
MAX_ZIP_FILES = 2_000
MAX_ZIP_BYTES = 512 * 1024**2
"""Of all files put in one zip, before compression."""
HIDDEN_PREFIXES = (".coderoom/",)  # coderoom's own scripts and state in a workspace: not artifacts
_CHUNK = 1024 * 1024


class FileTooLarge(Exception):
    """A file is over the bound of what was asked for it."""


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int
    kind: str = "file"  # or "dir", "link", "other": the exit policy judges a file by its siblings
    target: str | None = None  # a link's, when known


class FileSource(Protocol):
    """Where files come from: a live session's workspace or a run folder."""

    own_notes: tuple[str, ...]
    """Paths of coderoom's own LEFT_OUT_NOTE files here (a run folder's), not a sandbox's forgery."""

    async def list(self, *, quiet: bool = False) -> list[FileInfo]:
        """Every entry, of any kind (at most MAX_LISTED_FILES files); `quiet`: only to judge a
        read by the exit policy, not a listing the user asked for (a session records none)."""

    async def read(self, path: PurePosixPath, max_bytes: int) -> bytes:
        """`path`'s bytes: at most `max_bytes + 1` (so a caller sees that it is over), or
        FileTooLarge; FileNotFoundError when it is not a regular file there."""


class RunFolderFiles:
    """The regular files of a run folder (outputs, workspace.tar, run.jsonl), never through a link."""

    own_notes: tuple[str, ...] = (LEFT_OUT_NOTE,)

    def __init__(self, root: Path) -> None:
        self.root = root

    async def list(self, *, quiet: bool = False) -> list[FileInfo]:
        return await asyncio.to_thread(self._list)

    def _list(self) -> builtins.list[FileInfo]:  # `list` here is the method above
        return [FileInfo(e.name, e.size, e.kind, e.target) for e in folder_entries(self.root, max_files=MAX_LISTED_FILES)]

    async def read(self, path: PurePosixPath, max_bytes: int) -> bytes:
        return await asyncio.to_thread(self._read, path, max_bytes)

    def _read(self, path: PurePosixPath, max_bytes: int) -> bytes:
        try:
            fd = open_beneath(self.root, path, os.O_RDONLY)
        except OSError:  # a link (ELOOP), a folder, a FIFO or nothing: not a file of this run
            raise FileNotFoundError(str(path)) from None
        with os.fdopen(fd, "rb") as handle:
            return handle.read(max_bytes + 1)


class SessionFiles:
    """The workspace of a live session, through the session's own bounded, link-refusing reads.

    Under the session's own read bound (a preview) the first `max_bytes + 1` bytes are read, as
    from a run folder; a download over that bound is FileTooLarge. What the sandbox will not read
    (no such file, a planted link out of the workspace, a special file) is FileNotFoundError.
    """

    own_notes: tuple[str, ...] = ()

    def __init__(self, session: Any) -> None:
        self.session = session

    async def list(self, *, quiet: bool = False) -> list[FileInfo]:
        return [FileInfo(str(i.path), int(i.size), i.kind) for i in await self.session.files(quiet=quiet)]

    async def read(self, path: PurePosixPath, max_bytes: int) -> bytes:
        bound = self.session.max_read_bytes
        try:
            if max_bytes < bound:
                return await self.session.read_file(str(path), max_bytes=max_bytes, head=True)
            return await self.session.read_file(str(path), max_bytes=bound)
        except NoSuchFile:
            raise FileNotFoundError(str(path)) from None
        except ReadTooLarge:
            raise FileTooLarge(f"over {bound:,} bytes, the most read from a live session (MAX_READ_BYTES)") from None


def checked_path(raw: str | None) -> PurePosixPath:
    """The `path` query parameter as a safe relative path; UnsafePath otherwise."""
    if raw is None or len(raw) > 4096:
        raise UnsafePath("no path, or one over 4096 characters")
    return safe_relative_path(raw)


async def exit_view(source: FileSource, *, quiet: bool = False) -> tuple[ExitPolicy, list[FileInfo]]:
    """The exit policy for everything `source` holds, and its regular files the policy lets out
    (coderoom's own scripts and state left aside), outputs first."""
    entries = await source.list(quiet=quiet)
    policy = exit_policy((ExitEntry(e.path, e.kind, e.target) for e in entries), own=source.own_notes)
    files = [e for e in entries if e.kind == "file" and not e.path.startswith(HIDDEN_PREFIXES)
             and policy.refusal(e.path) is None][:MAX_LISTED_FILES]  # fmt: skip
    files.sort(key=lambda f: (not f.path.startswith("output/"), f.path))
    return policy, files


async def listing(source: FileSource) -> dict[str, Any]:
    """The files to show and what the exit policy kept in (with why), names escaped for showing."""
    policy, files = await exit_view(source)
    left_out = [{"path": name, "shown": terminal_safe(name), "reason": terminal_safe(reason)}
                for name, reason in policy.left_out() if not name.startswith(HIDDEN_PREFIXES)]  # fmt: skip
    return {"files": [{"path": f.path, "shown": terminal_safe(f.path), "size": f.size} for f in files],
            "left_out": left_out}  # fmt: skip


async def _leaving(source: FileSource, path: PurePosixPath) -> None:
    """A single file asked for by name leaves only if the policy, judging the whole listing, lets it."""
    policy, _ = await exit_view(source, quiet=True)
    refuse_leaving(policy, path)


async def preview(source: FileSource, path: PurePosixPath) -> dict[str, Any]:
    """What the page shows for `path`: a table, sanitised HTML, an image to load, text, or nothing."""
    await _leaving(source, path)
    try:
        data = await source.read(path, MAX_PREVIEW_BYTES)
    except FileTooLarge:
        return {"kind": "binary", "note": f"over {MAX_PREVIEW_BYTES} bytes: download it to look at it"}
    complete = len(data) <= MAX_PREVIEW_BYTES
    data = data[:MAX_PREVIEW_BYTES]
    suffix = path.suffix.lower()
    if image_type(data):
        return {"kind": "image"}
    text = as_text(data)
    if text is None:
        return {"kind": "binary", "note": "not text or a known image: download it to look at it"}
    if suffix == ".csv":
        table = csv_table(text, complete=complete)
        rows = [[terminal_safe(cell) for cell in row] for row in table.rows]
        return {"kind": "csv", "header": [terminal_safe(cell) for cell in table.header], "rows": rows, "cut": table.cut}
    if suffix in (".md", ".markdown"):
        return {"kind": "markdown", "html": markdown_html(text), "complete": complete}
    cut = not complete or len(text) > MAX_PREVIEW_TEXT_CHARS
    return {"kind": "text", "text": terminal_safe(text[:MAX_PREVIEW_TEXT_CHARS]), "cut": cut}


async def download(source: FileSource, path: PurePosixPath, *, inline: bool) -> Response:
    """`path` as a download; with `inline`, shown in the page only when its bytes are an image."""
    await _leaving(source, path)
    data = await source.read(path, MAX_DOWNLOAD_BYTES)
    if len(data) > MAX_DOWNLOAD_BYTES:
        raise FileTooLarge(f"{path} is over {MAX_DOWNLOAD_BYTES} bytes (MAX_DOWNLOAD_BYTES)")
    mime = image_type(data)
    if inline and mime is None:
        return JSONResponse({"error": "only PNG, JPEG, GIF and WebP images are shown inline"}, status_code=415)
    disposition = "inline" if inline else "attachment"
    return Response(
        data,
        media_type=mime if inline else "application/octet-stream",
        headers={"content-disposition": _disposition(disposition, path.name), "content-security-policy": FILE_CSP},
    )


async def zipped(source: FileSource, name: str) -> Response:
    """Every listed file in one zip, bounded in files and bytes; the zip is spooled to a temp
    file, compressed in a worker thread (the server keeps answering meanwhile). The zip goes to a
    user's machine, so each name is `portable_path`'s (no `..\\x`, `C:` or device name for a
    Windows unzip to act on); a file whose portable name another already has is left out, as is
    what the exit policy keeps in under either name (`ipython:config.py` is written as
    `ipython_config.py`), and LEFT_OUT_NOTE in the zip says which and why."""
    policy, files = await exit_view(source)
    if len(files) > MAX_ZIP_FILES:
        raise FileTooLarge(f"more than {MAX_ZIP_FILES} files (MAX_ZIP_FILES)")
    spool = tempfile.TemporaryFile()
    try:
        total = 0
        named: set[str] = set()  # portable names, lowercased: a Windows file system ignores case
        left_out = [(name, reason) for name, reason in policy.left_out() if not name.startswith(HIDDEN_PREFIXES)]
        own_note = b""
        with zipfile.ZipFile(spool, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for info in files:
                path = safe_relative_path(info.path)
                member = portable_path(path)
                if str(member) == LEFT_OUT_NOTE:  # the run folder's own list: it goes into the zip's
                    own_note = await source.read(path, MAX_PREVIEW_BYTES)
                    continue
                if (reason := policy.refusal(member)) is not None:  # judged as it is written: `?fossil_` is `_fossil_`
                    left_out.append((str(path), reason))
                    continue
                if str(member).lower() in named:
                    left_out.append((str(path), "another file has the same name on Windows"))
                    continue
                named.add(str(member).lower())
                data = await source.read(path, min(MAX_DOWNLOAD_BYTES, MAX_ZIP_BYTES - total))
                total += len(data)
                if total > MAX_ZIP_BYTES or len(data) > MAX_DOWNLOAD_BYTES:
                    raise FileTooLarge(f"the files come to more than {MAX_ZIP_BYTES} bytes (MAX_ZIP_BYTES), "
                                       f"or one is over {MAX_DOWNLOAD_BYTES} (MAX_DOWNLOAD_BYTES)")
                await asyncio.to_thread(archive.writestr, str(member), data)
            if left_out or own_note:
                archive.writestr(LEFT_OUT_NOTE, left_out_note(left_out).encode() + own_note[:MAX_PREVIEW_BYTES])
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return StreamingResponse(
        _chunks(spool),
        media_type="application/zip",
        headers={"content-disposition": _disposition("attachment", f"{name}.zip"), "content-security-policy": FILE_CSP},
    )


def _chunks(handle: IO[bytes]) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(_CHUNK):
            yield chunk


def _disposition(kind: str, filename: str) -> str:
    """A Content-Disposition whose file name cannot break the header (RFC 6266 filename*) nor
    hide what it is (a bidi override or zero-width character is shown as its escape)."""
    ascii_name = "".join(c if c.isascii() and c.isalnum() or c in "._-" else "_" for c in filename)[:100] or "file"
    return f"{kind}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(terminal_safe(filename)[:200], safe='')}"
