"""A live (PTY) process as the backends keep it, with no SDK: its bounded output, and what the
SDK adapter (`pty_sessions`) needs of it.

Output a sandbox process writes is hostile and may never be read, so only the newest `cap`
bytes (`Limits.output_bytes`) are kept, with a count of what was dropped; a poll takes what is
there. The backends differ only in how bytes arrive (local: the launcher job's pipes; docker:
init.py's "data" replies) and how the process is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Protocol

MAX_LIVE_PROCESSES = 16  # live processes (PTY sessions, the kernel) one sandbox runs at once


class LiveOutput:
    """The newest `cap` bytes a live process wrote, and whether it has ended."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._dropped = 0
        self.closed = asyncio.Event()
        self._arrived = asyncio.Event()

    def keep(self, chunk: bytes) -> None:
        self._arrived.set()
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size > self._cap:  # keep the newest `cap` bytes
            excess = self._size - self._cap
            oldest = self._chunks.popleft()
            if len(oldest) > excess:
                self._chunks.appendleft(oldest[excess:])
            cut = min(excess, len(oldest))
            self._size -= cut
            self._dropped += cut

    def note(self, text: str) -> None:
        """A `[coderoom: ...]` line after the output so far (never dropped by the cap)."""
        self._arrived.set()
        self._chunks.append(f"\n[coderoom: {text}]\n".encode())

    async def collect(self, wait_s: float) -> tuple[bytes, bool]:
        """Output since the last call, after `wait_s` or when the process ends; and whether it ended.

        Waits first and drains after, so the output stays within `cap` however much arrives
        while waiting. Bytes as they came: a UTF-8 character may be split between two calls.
        """
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.closed.wait(), wait_s)
        return self._drain()

    async def collect_any(self) -> tuple[bytes, bool]:
        """Output since the last call as soon as there is any, or the end; and whether it ended.
        For a channel read as it comes (`start_channel`), where `collect`'s wait would be the
        latency of every message."""
        if not (self._chunks or self.closed.is_set()):
            arrived = asyncio.ensure_future(self._arrived.wait())
            ended = asyncio.ensure_future(self.closed.wait())
            try:
                await asyncio.wait((arrived, ended), return_when=asyncio.FIRST_COMPLETED)
            finally:
                arrived.cancel()
                ended.cancel()
        return self._drain()

    def _drain(self) -> tuple[bytes, bool]:
        self._arrived.clear()
        closed = self.closed.is_set()
        output = b"".join(self._chunks)
        if self._dropped:
            output = f"[... {self._dropped} bytes of output dropped ...]\n".encode() + output
        self._chunks.clear()
        self._size = self._dropped = 0
        return output, closed


class LiveProcess(Protocol):
    """What `pty_sessions` uses of a backend's live process."""

    tty: bool  # on a terminal: it takes input
    stopped_by: str | None  # the limit that ended it, named as for a command

    @property
    def alive(self) -> bool: ...

    @property
    def exit_code(self) -> int | None:
        """None while it runs or its output is not all in."""

    async def collect(self, wait_s: float) -> tuple[bytes, bool]: ...

    async def collect_any(self) -> tuple[bytes, bool]: ...

    async def write(self, data: bytes) -> None: ...
