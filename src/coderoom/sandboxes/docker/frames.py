"""init.py's replies as they leave an attached container: Docker's multiplexed stream (frames of
an 8-byte header, its stream number, three zero bytes and a big-endian length, then the data),
stdout cut into lines.

It is written by PID 1 of a hostile container, so both readers of it (`channel` in a session,
`plain` on the CLI's fast path) take it from here: data of another stream is handed aside, and
a line longer than the bound its reader gives (`line_bound` of the largest reply it may get) ends
the stream with ValueError before it is kept whole.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

STDOUT = 1
LINE_OVERHEAD = 1 << 16  # a reply's JSON around its base64 payloads
_HEADER = struct.Struct(">BxxxL")
_CHUNK = 1 << 16


def line_bound(reply_bytes: int) -> int:
    """The longest reply line that may carry `reply_bytes` of payload (base64 and JSON included)."""
    return reply_bytes * 4 // 3 + LINE_OVERHEAD


def frames(recv: Callable[[int], bytes]) -> Iterator[tuple[int, bytes]]:
    """(stream, data) pieces of the frames read with `recv`, until the stream ends; a frame's
    data comes in pieces of at most 64 KiB, whatever length its header claims."""
    while True:
        header = _read_exactly(recv, _HEADER.size)
        if len(header) < _HEADER.size:
            return
        stream, left = _HEADER.unpack(header)
        while left > 0:
            piece = recv(min(left, _CHUNK))
            if not piece:
                return
            left -= len(piece)
            yield stream, piece


class Lines:
    """stdout cut into lines, the unfinished one kept within a bound."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes, bound: int) -> list[bytes]:
        """The lines `data` completes; ValueError when what is left unfinished passes `bound`."""
        self._buffer += data
        lines = []
        while (end := self._buffer.find(b"\n")) >= 0:
            lines.append(bytes(self._buffer[:end]))
            del self._buffer[: end + 1]
        if len(self._buffer) > bound:
            raise ValueError(f"a reply line over {bound} bytes")
        return lines


def _read_exactly(recv: Callable[[int], bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        piece = recv(size - len(data))
        if not piece:
            break
        data += piece
    return data
