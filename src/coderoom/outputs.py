"""Checks of required outputs by file type: is each present and valid for what its name says?

The bytes come from the sandbox, so they are hostile; extraction to the host is
`coderoom.hostile.archive`'s job, not this module's.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import PurePosixPath

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

