"""Artifacts leaving the sandbox: safe extraction to the host, and checks by file type.

Everything here treats the workspace archive as hostile: it was written by code the model wrote.
Extraction writes regular files and directories only, never follows a symlink (in the archive
or already in the destination), never leaves the destination, and is bounded in count and size.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

MAX_FILES = 10_000
MAX_BYTES = 2 * 1024**3
_CHUNK = 1024 * 1024


class UnsafePath(ValueError):
    """A member name that could escape the destination or is not a plain relative path."""


@dataclass
class ExtractReport:
    extracted: list[str] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    bytes_written: int = 0


def safe_relative_path(name: str) -> PurePosixPath:
    """Normalise a workspace-relative name; refuse absolute, `..`, empty and NUL-bearing names."""
    if not name or "\x00" in name:
        raise UnsafePath(f"{name!r}: empty or contains NUL")
    path = PurePosixPath(name)
    if path.is_absolute():
        raise UnsafePath(f"{name!r}: absolute path")
    parts = [part for part in path.parts if part not in ("", ".")]
    if not parts:
        raise UnsafePath(f"{name!r}: names the root")
    if any(part == ".." for part in parts):
        raise UnsafePath(f"{name!r}: contains '..'")
    return PurePosixPath(*parts)


def _open_dir_beneath(root_fd: int, parts: Iterable[str], *, create: bool) -> int:
    """Open (and maybe create) a directory chain under root_fd, refusing symlinks at every step."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        return fd
    except BaseException:
        os.close(fd)
        raise


def _write_member(root_fd: int, rel: PurePosixPath, source: IO[bytes], budget: int) -> int:
    parent_fd = _open_dir_beneath(root_fd, rel.parts[:-1], create=True)
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
        written = 0
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(_CHUNK):
                written += len(chunk)
                if written > budget:
                    raise OverflowError("size budget exceeded")
                out.write(chunk)
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
) -> ExtractReport:
    """Extract regular files and directories from a workspace tar into `dest`.

    `members`, when given, limits extraction to those workspace-relative paths (and the
    contents of those directories). Anything else that is unsafe is skipped and listed in
    `report.refused` with the reason; nothing is ever written outside `dest`.
    """
    wanted = {str(safe_relative_path(m)) for m in members} if members is not None else None
    dest.mkdir(parents=True, exist_ok=True)
    report = ExtractReport()
    root_fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    tar = (
        tarfile.open(archive, mode="r:*")
        if isinstance(archive, Path)
        else tarfile.open(fileobj=archive, mode="r|*")
    )
    try:
        with tar:
            for member in tar:
                _extract_one(tar, member, root_fd, wanted, report, max_files, max_bytes)
    finally:
        os.close(root_fd)
    return report


def _extract_one(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    root_fd: int,
    wanted: set[str] | None,
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
    if member.isdir():
        try:
            os.close(_open_dir_beneath(root_fd, rel.parts, create=True))
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


# ---------------------------------------------------------------- checks by type


@dataclass
class OutputCheck:
    path: str
    ok: bool
    detail: str
    size: int | None = None


def check_output(path: str, data: bytes | None, *, allow_empty: bool = False) -> OutputCheck:
    """Is this required output present and valid for its type? The detail says why not."""
    if data is None:
        return OutputCheck(path, False, "missing: the file was not created")
    suffix = PurePosixPath(path).suffix.lower()
    checker = _CHECKERS.get(suffix, _check_nonempty)
    ok, detail = checker(data, allow_empty)
    return OutputCheck(path, ok, detail, size=len(data))


def _check_nonempty(data: bytes, allow_empty: bool) -> tuple[bool, str]:
    if not data and not allow_empty:
        return False, "empty file"
    return True, f"{len(data)} bytes"


def _decode_text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _check_text(data: bytes, allow_empty: bool) -> tuple[bool, str]:
    text = _decode_text(data)
    if text is None:
        return False, "not valid UTF-8 text"
    if not text.strip() and not allow_empty:
        return False, "empty text"
    return True, f"text: {len(text.splitlines())} lines"


def _check_csv(data: bytes, allow_empty: bool) -> tuple[bool, str]:
    text = _decode_text(data)
    if text is None:
        return False, "CSV is not valid UTF-8"
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        return False, f"CSV does not parse: {exc}"
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        return False, "CSV has no header"
    header, body = rows[0], rows[1:]
    ragged = [i + 2 for i, row in enumerate(body) if len(row) != len(header)]
    if ragged:
        return False, f"CSV rows {ragged[:5]} do not have {len(header)} columns like the header"
    if not body and not allow_empty:
        return False, "CSV has a header but no data rows (the job does not allow empty)"
    return True, f"csv: {len(body)} rows, {len(header)} columns"


def _check_json(data: bytes, allow_empty: bool) -> tuple[bool, str]:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        return False, f"JSON does not parse: {exc}"
    if value in ({}, [], None) and not allow_empty:
        return False, "JSON is empty"
    return True, f"json: {type(value).__name__}"


def _check_image(data: bytes, allow_empty: bool) -> tuple[bool, str]:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return True, f"{image.format.lower()}: {image.width}x{image.height}"
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        return False, f"image does not decode: {exc}"


_CHECKERS = {
    ".csv": _check_csv,
    ".json": _check_json,
    ".png": _check_image,
    ".jpg": _check_image,
    ".jpeg": _check_image,
    ".md": _check_text,
    ".markdown": _check_text,
    ".txt": _check_text,
    ".html": _check_text,
}

