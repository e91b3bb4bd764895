"""Check required outputs by type, streaming and bounded: run inside the sandbox that made them,
or on the host as a child process under its own rlimits (`--memory`, `--cpu`).

    python3 -I check_outputs.py [--memory BYTES] [--cpu SECONDS] '[["output/a.csv", false], ...]'

prints one JSON list, one {"ok", "detail", "size"} per path, in order. Every decision is made
before reading more than a bound: a PNG's IHDR and a JPEG's SOF give the pixel count, refused
above MAX_PIXELS before any pixel is decompressed; PNG image data is then inflated in MiB pieces
and only counted; a CSV is streamed row by row with lines bounded; JSON is parsed only under
MAX_JSON_BYTES. Files are opened with O_NOFOLLOW and must be regular. Standard library only.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import resource
import stat
import struct
import sys
import zlib
from collections.abc import Callable, Iterator

MAX_PIXELS = 64_000_000
MAX_JSON_BYTES = 64 * 1024**2
MAX_LINE_CHARS = 1024**2
CHUNK = 1024**2
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))
# SOF markers carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


class Invalid(Exception):
    """The file is not valid for its type; the message says why."""


Result = tuple[bool, str]


def _mib(n: int) -> str:
    return f"{n // 1024**2} MiB"


def _too_many_pixels(kind: str, width: int, height: int) -> Invalid:
    megapixels = width * height / 1e6
    return Invalid(
        f"{kind} is {width}x{height} ({megapixels:.0f} megapixels): over the "
        f"{MAX_PIXELS // 1_000_000} megapixel limit, not decoded (a decompression bomb?)"
    )


def _chunk_name(kind: bytes) -> str:
    return kind.decode("ascii") if kind.isalpha() else "0x" + kind.hex()


def _read_exact(f: io.BufferedReader, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise Invalid(f"cut short in {what}")
    return data


def _png_data_size(width: int, height: int, bits_per_pixel: int, interlaced: bool) -> int:
    """Bytes of filtered scanlines the IDAT stream must inflate to."""
    passes = _ADAM7 if interlaced else ((0, 0, 1, 1),)
    total = 0
    for x0, y0, dx, dy in passes:
        columns, rows = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if columns > 0 and rows > 0:
            total += rows * (1 + -(-(columns * bits_per_pixel) // 8))
    return total


def check_png(f: io.BufferedReader, allow_empty: bool) -> Result:
    if _read_exact(f, 8, "the signature") != PNG_MAGIC:
        raise Invalid("not a PNG")
    length, kind = struct.unpack(">I4s", _read_exact(f, 8, "IHDR"))
    if kind != b"IHDR" or length != 13:
        raise Invalid("the first chunk is not IHDR")
    header = _read_exact(f, 13, "IHDR")
    width, height, depth, color, compression, filtering, interlace = struct.unpack(">IIBBBBB", header)
    if zlib.crc32(kind + header) != struct.unpack(">I", _read_exact(f, 4, "IHDR"))[0]:
        raise Invalid("IHDR checksum mismatch")
    if not 0 < width < 2**31 or not 0 < height < 2**31:
        raise Invalid(f"bad size {width}x{height}")
    if width * height > MAX_PIXELS:
        raise _too_many_pixels("png", width, height)
    if depth not in _PNG_DEPTHS.get(color, ()) or compression or filtering or interlace > 1:
        raise Invalid(f"unsupported IHDR (depth {depth}, colour type {color})")
    expected = _png_data_size(width, height, depth * _PNG_CHANNELS[color], bool(interlace))
    inflater, inflated, palette = zlib.decompressobj(), 0, False
    while True:
        length, kind = struct.unpack(">I4s", _read_exact(f, 8, "a chunk header"))
        if length >= 2**31:
            raise Invalid("chunk length over 2**31")
        crc = zlib.crc32(kind)
        left = length
        while left:
            piece = _read_exact(f, min(left, CHUNK), f"chunk {_chunk_name(kind)}")
            left -= len(piece)
            crc = zlib.crc32(piece, crc)
            if kind == b"IDAT":
                if color == 3 and not palette:
                    raise Invalid("palette image without PLTE before IDAT")
                inflated += _inflate(inflater, piece, expected - inflated)
        if crc != struct.unpack(">I", _read_exact(f, 4, "a chunk checksum"))[0]:
            raise Invalid(f"chunk {_chunk_name(kind)} checksum mismatch")
        palette = palette or kind == b"PLTE"
        if kind == b"IEND":
            break
    if not inflater.eof or inflated != expected:
        raise Invalid(f"image data is incomplete ({inflated} of {expected} bytes)")
    return True, f"png: {width}x{height}"


def _inflate(inflater: zlib._Decompress, data: bytes, room: int) -> int:  # type: ignore[name-defined]
    """Inflate `data` a MiB at a time, keeping nothing; more than `room` bytes is invalid."""
    produced = 0
    try:
        while data and not inflater.eof:
            out = inflater.decompress(data, CHUNK)
            produced += len(out)
            if produced > room:
                raise Invalid("more image data than its size needs")
            data = inflater.unconsumed_tail
    except zlib.error as exc:
        raise Invalid(f"image data does not inflate: {exc}") from None
    return produced


def check_jpeg(f: io.BufferedReader, allow_empty: bool) -> Result:
    if _read_exact(f, 2, "the signature") != b"\xff\xd8":
        raise Invalid("not a JPEG")
    size: tuple[int, int] | None = None
    while True:
        marker = _read_exact(f, 2, "a marker")
        while marker == b"\xff\xff":  # fill bytes
            marker = b"\xff" + _read_exact(f, 1, "a marker")
        if marker[0] != 0xFF:
            raise Invalid("bad marker")
        code = marker[1]
        if code == 0x01 or 0xD0 <= code <= 0xD7:
            continue
        if code == 0xD9:
            raise Invalid("no image data before EOI")
        (length,) = struct.unpack(">H", _read_exact(f, 2, "a segment length"))
        if length < 2:
            raise Invalid("bad segment length")
        segment = _read_exact(f, length - 2, "a segment")
        if code in _JPEG_SOF:
            if len(segment) < 6:
                raise Invalid("short frame header")
            height, width = struct.unpack(">HH", segment[1:5])
            if not width or not height:
                raise Invalid(f"bad size {width}x{height}")
            if width * height > MAX_PIXELS:
                raise _too_many_pixels("jpeg", width, height)
            size = (width, height)
        if code == 0xDA:
            break
    if size is None:
        raise Invalid("no frame header before the image data")
    if not _find(f, b"\xff\xd9"):
        raise Invalid("no end-of-image marker (file cut short)")
    return True, f"jpeg: {size[0]}x{size[1]}"


def _find(f: io.BufferedReader, needle: bytes) -> bool:
    tail = b""
    while chunk := f.read(CHUNK):
        if needle in tail + chunk:
            return True
        tail = chunk[-len(needle) + 1 :]
    return False


def check_image(f: io.BufferedReader, allow_empty: bool) -> Result:
    magic = f.peek(8)[:8]
    try:
        if magic.startswith(PNG_MAGIC):
            return check_png(f, allow_empty)
        if magic.startswith(JPEG_MAGIC):
            return check_jpeg(f, allow_empty)
        raise Invalid("neither PNG nor JPEG")
    except Invalid as exc:
        raise Invalid(f"image does not decode: {exc}") from None


def _text(f: io.BufferedReader) -> io.TextIOWrapper:
    return io.TextIOWrapper(f, encoding="utf-8", errors="strict", newline="")


def _bounded_lines(text: io.TextIOWrapper) -> Iterator[str]:
    while line := text.readline(MAX_LINE_CHARS):
        if len(line) == MAX_LINE_CHARS and not line.endswith(("\n", "\r")):
            raise Invalid(f"a line is longer than {MAX_LINE_CHARS} characters (the line limit)")
        yield line


def check_text(f: io.BufferedReader, allow_empty: bool) -> Result:
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines, blank, last = 0, True, "\n"
    try:
        while chunk := f.read(CHUNK):
            text = decoder.decode(chunk)
            lines += text.count("\n")
            blank = blank and not text.strip()
            last = text[-1:] or last
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise Invalid("not valid UTF-8 text") from None
    if blank and not allow_empty:
        raise Invalid("empty text")
    return True, f"text: {lines + (last != chr(10))} lines"


def check_csv(f: io.BufferedReader, allow_empty: bool) -> Result:
    header: list[str] | None = None
    rows, ragged = 0, list[str]()
    try:
        reader = csv.reader(_bounded_lines(_text(f)))
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = row
                continue
            rows += 1
            if len(row) != len(header) and len(ragged) < 5:
                ragged.append(str(reader.line_num))
    except UnicodeDecodeError:
        raise Invalid("CSV is not valid UTF-8") from None
    except csv.Error as exc:
        raise Invalid(f"CSV does not parse: {exc}") from None
    if header is None:
        raise Invalid("CSV has no header")
    if ragged:
        raise Invalid(f"CSV lines {', '.join(ragged)} do not have {len(header)} columns like the header")
    if not rows and not allow_empty:
        raise Invalid("CSV has a header but no data rows (the job does not allow empty)")
    return True, f"csv: {rows} rows, {len(header)} columns"


def check_json(f: io.BufferedReader, allow_empty: bool) -> Result:
    data = f.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise Invalid(f"JSON over {_mib(MAX_JSON_BYTES)} (the JSON limit) is not parsed")
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise Invalid(f"JSON does not parse: {str(exc)[:200]}") from None
    if value in ({}, [], None) and not allow_empty:
        raise Invalid("JSON is empty")
    return True, f"json: {type(value).__name__}"


CHECKERS: dict[str, Callable[[io.BufferedReader, bool], Result]] = {
    ".csv": check_csv,
    ".json": check_json,
    ".png": check_image,
    ".jpg": check_image,
    ".jpeg": check_image,
    ".md": check_text,
    ".markdown": check_text,
    ".txt": check_text,
    ".html": check_text,
}


def check(path: str, allow_empty: bool) -> dict[str, object]:
    """The verdict on one file: never raises for anything the file holds."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {"ok": False, "detail": "missing: the file was not created", "size": None}
    except PermissionError as exc:  # it exists, but the checker may not open it (the sandbox locked it)
        return {"ok": False, "detail": f"unreadable: cannot open it ({os.strerror(exc.errno or 0)})", "size": None}
    except OSError as exc:
        return {"ok": False, "detail": f"missing: cannot open it ({os.strerror(exc.errno or 0)})", "size": None}
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return {"ok": False, "detail": "missing: not a regular file", "size": None}
        if info.st_size == 0 and not allow_empty:
            return {"ok": False, "detail": "empty file", "size": 0}
        checker = CHECKERS.get(os.path.splitext(path)[1].lower())
        try:
            ok, detail = checker(f, allow_empty) if checker else (True, f"{info.st_size} bytes")
        except Invalid as exc:
            ok, detail = False, str(exc)
        except MemoryError:
            ok, detail = False, "needs more memory than the check may use"
        return {"ok": ok, "detail": detail, "size": info.st_size}


def main(argv: list[str]) -> int:
    args = list(argv)
    while args and args[0] in ("--memory", "--cpu"):
        name, value = args.pop(0), int(args.pop(0))
        which = resource.RLIMIT_AS if name == "--memory" else resource.RLIMIT_CPU
        resource.setrlimit(which, (value, value))
    wanted = json.loads(args[0])
    print(json.dumps([check(str(path), bool(allow_empty)) for path, allow_empty in wanted]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
