"""The host's end of a run_python kernel's channel: one JSON line per request written to the
supervisor's stdin, one JSON line per message read from its stdout (`kernel_server`, `serve
channel`). A warm cell then costs the kernel's own time and two pipe hops, where the FIFO
transport pays a new sandbox command (namespaces, a bash) for every cell.

Everything read here came from the sandbox, so it is hostile: lines are bounded (MAX_LINE, a
longer one is skipped up to its end), anything that is not a JSON object naming the awaited
request is ignored, and a reply is validated by the caller (`CellReply`) like a FIFO reply.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol, runtime_checkable

from ..sandboxes.live import LiveProcess

# A reply line: the kernel keeps at most ~40,000 characters of a cell's streams, value, error
# and figures (`kernel_server`), at most 12 bytes each as ASCII-escaped JSON. The FIFO relay's
# reply was bounded by the command's output_bytes (1 MiB by default) in the same way.
MAX_LINE = 1024**2
CHANNEL_CAP = 2 * MAX_LINE  # output kept between two reads (the host drains it as it comes)


@runtime_checkable
class Channels(Protocol):
    """What a channel needs of its backend session (`pty_sessions.PtySessions`); a session
    without it (the SDK's own backends) has the kernel use its FIFOs."""

    async def start_channel(self, *command: str, cap: int) -> LiveProcess: ...

    async def end_channel(self, process: LiveProcess) -> None: ...


class ChannelClosed(Exception):
    """The supervisor's end closed: it exited or was killed. `acked`: after the cell started."""

    def __init__(self, acked: bool, output: str = "") -> None:
        super().__init__(output)
        self.acked = acked
        self.output = output


class KernelChannel:
    def __init__(self, backend: Channels, process: LiveProcess) -> None:
        self._backend = backend
        self._process = process
        self._lines: list[bytes] = []
        self._partial = bytearray()
        self._skipping = False  # inside a line longer than MAX_LINE
        self._closed = False
        self._writing = asyncio.Lock()
        self._seen: list[bytes] = []  # the last bytes read, for a start failure's message

    @classmethod
    async def start(cls, backend: Channels, command: list[str], wait_s: float) -> KernelChannel:
        """Start the supervisor with its channel and wait for its `ready` line (TimeoutError
        after `wait_s`, ChannelClosed with its last output if it exits first)."""
        channel = cls(backend, await backend.start_channel(*command, cap=CHANNEL_CAP))
        try:
            async with asyncio.timeout(wait_s):
                while (await channel._next()).get("ready") is not True:
                    pass
        except BaseException:
            await channel.close()
            raise
        return channel

    @property
    def alive(self) -> bool:
        return not self._closed and self._process.alive

    async def send(self, message: dict[str, Any]) -> None:
        """One request line (JSON cannot hold a raw newline, so it is one line)."""
        data = json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"
        async with self._writing:
            await self._process.write(data)

    async def call(self, ident: str, request: dict[str, Any] | None, ack_s: float, reply_s: float) -> dict[str, Any]:
        """Run `request` as `ident` (None: it is in its request file): its reply, unvalidated.
        TimeoutError when no ack comes within `ack_s` or no reply within `reply_s` after it;
        ChannelClosed when the kernel ends."""
        message: dict[str, Any] = {"op": "run", "id": ident}
        if request is not None:
            message["request"] = request
        await self.send(message)
        acked = False
        try:
            async with asyncio.timeout(ack_s) as deadline:
                while True:
                    message = await self._next(acked)
                    if message.get("id") != ident:
                        continue
                    if message.get("ack") is True and not acked:
                        acked = True
                        deadline.reschedule(asyncio.get_running_loop().time() + reply_s)
                    reply = message.get("reply")
                    if isinstance(reply, dict):
                        return reply
        except ChannelClosed as closed:
            raise ChannelClosed(acked, closed.output) from None

    async def _next(self, acked: bool = False) -> dict[str, Any]:
        """The next JSON object on the channel; other lines are skipped."""
        while True:
            while self._lines:
                try:
                    message = json.loads(self._lines.pop(0))
                except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
                    continue
                if isinstance(message, dict):
                    return message
            if self._closed:
                raise ChannelClosed(acked, b"".join(self._seen).decode("utf-8", "replace")[-2000:])
            data, ended = await self._process.collect_any()
            self._take(data)
            self._closed = ended

    def _take(self, data: bytes) -> None:
        self._seen = [*self._seen[-1:], data[-2000:]]
        *complete, rest = data.split(b"\n")
        for piece in complete:
            if not self._skipping and len(self._partial) + len(piece) <= MAX_LINE:
                self._lines.append(bytes(self._partial + piece))
            self._partial.clear()
            self._skipping = False
        if self._skipping or len(self._partial) + len(rest) > MAX_LINE:
            self._partial.clear()
            self._skipping = True
        else:
            self._partial += rest

    async def close(self) -> None:
        """End the supervisor (and its worker) if it still runs; idempotent."""
        self._closed = True
        await self._backend.end_channel(self._process)
