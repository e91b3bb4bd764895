"""Sandbox output as MCP content: text made inert and bounded, images only when they check out.

Everything here came from a sandbox, so it is hostile: text goes through `hostile.text`
(control and invisible characters shown as escapes) and is cut at MAX_TEXT_CHARS; bytes become
image content only if their header says PNG or JPEG with sane dimensions (at most
MAX_IMAGE_PIXELS) and they are at most MAX_IMAGE_BYTES; other bytes are text when they are
UTF-8, else a base64 blob.
"""

from __future__ import annotations

import base64
import struct

from mcp.types import BlobResourceContents, EmbeddedResource, ImageContent, TextContent

from ..hostile.text import terminal_safe
from ..record import bounded

MAX_TEXT_CHARS = 100_000
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_IMAGE_PIXELS = 64_000_000  # the output checks' limit for PNG and JPEG
MAX_JPEG_SCAN = 1024 * 1024  # bytes searched for a JPEG's frame header
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def safe(value: str) -> str:
    """Sandbox text made inert and bounded: what a text block and a structured field carry."""
    return terminal_safe(bounded(value, MAX_TEXT_CHARS))


def text(value: str) -> TextContent:
    return TextContent(type="text", text=safe(value))


def image_type(data: bytes) -> str | None:
    """'image/png' or 'image/jpeg' when the header is valid and within the bounds, else None."""
    if len(data) > MAX_IMAGE_BYTES:
        return None
    if data.startswith(PNG_SIGNATURE) and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return "image/png" if 0 < width * height <= MAX_IMAGE_PIXELS else None
    if data.startswith(b"\xff\xd8\xff"):
        size = _jpeg_size(data[:MAX_JPEG_SCAN])
        return "image/jpeg" if size and 0 < size[0] * size[1] <= MAX_IMAGE_PIXELS else None
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the first SOF segment, walking segment lengths (no decoding)."""
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        length = int.from_bytes(data[at + 2:at + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[at + 5:at + 9])
            return width, height
        if length < 2:
            return None
        at += 2 + length
    return None


def image(data: bytes) -> ImageContent | None:
    mime = image_type(data)
    if mime is None:
        return None
    return ImageContent(type="image", data=base64.b64encode(data).decode(), mime_type=mime)


def file_content(uri: str, data: bytes) -> ImageContent | TextContent | EmbeddedResource:
    """A workspace file: an image if it is one, text if UTF-8, else a base64 blob."""
    shown = image(data)
    if shown is not None:
        return shown
    try:
        return text(data.decode("utf-8"))
    except UnicodeDecodeError:
        blob = BlobResourceContents(uri=uri, blob=base64.b64encode(data).decode(), mime_type="application/octet-stream")
        return EmbeddedResource(type="resource", resource=blob)
