"""Previews of files a sandbox wrote: what kind of file it really is, and a CSV as a bounded table.

Nothing here trusts a name's suffix for what it serves: an image is an image only when its first
bytes say PNG, JPEG, GIF or WebP (SVG is never one: it is a document that can carry script), and a
CSV is parsed only within row, column and cell bounds.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

MAX_PREVIEW_ROWS = 200
MAX_PREVIEW_COLUMNS = 50
MAX_CELL_CHARS = 200
"""Of a CSV preview: rows after the header, columns and characters of one cell shown."""

_MAGIC = [
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
]


def image_type(data: bytes) -> str | None:
    """The MIME type of a PNG, JPEG, GIF or WebP image by its magic bytes; None for anything else."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def as_text(data: bytes) -> str | None:
    """`data` as text when it is UTF-8 without NUL bytes (so not a binary file), else None.

    A preview may have cut a multi-byte character at its end: that one is dropped, not refused.
    """
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8", "replace")
        return None


@dataclass
class Table:
    """A CSV's first rows, each cell cut to MAX_CELL_CHARS; `cut` says what was left out."""

    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    cut: list[str] = field(default_factory=list)


def csv_table(text: str, *, complete: bool = True) -> Table:
    """The first MAX_PREVIEW_ROWS rows of `text` (a CSV) and at most MAX_PREVIEW_COLUMNS columns.

    `complete` False says `text` is only the start of the file (its last row may be cut). A
    malformed CSV is shown as far as it parses.
    """
    rows: list[list[str]] = []
    cut: list[str] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        for row in reader:
            if len(rows) > MAX_PREVIEW_ROWS:
                cut.append(f"only the first {MAX_PREVIEW_ROWS} rows are shown")
                break
            if len(row) > MAX_PREVIEW_COLUMNS and not any("columns" in c for c in cut):
                cut.append(f"only the first {MAX_PREVIEW_COLUMNS} columns are shown")
            rows.append([_cell(value) for value in row[:MAX_PREVIEW_COLUMNS]])
    except csv.Error as exc:
        cut.append(f"the CSV stops parsing at line {reader.line_num}: {str(exc)[:100]}")
    else:
        if not complete and not cut:
            cut.append("the file is larger than the preview: only its start is shown")
    if not rows:
        return Table(header=[], cut=cut)
    return Table(header=rows[0], rows=rows[1:], cut=cut)


def _cell(value: str) -> str:
    return value if len(value) <= MAX_CELL_CHARS else value[: MAX_CELL_CHARS - 1] + "…"
