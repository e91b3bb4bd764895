"""`run_job`'s progress as MCP progress notifications, the same whether the job runs on the
server's machine or on a Ray node (`--ray`, where its reports come through `cluster.progress`).

Why: a whole run takes minutes, most of them waiting for the model; a client that asked for
progress (a progressToken) hears which turn the run is at, what it is doing and, while a reply
streams in, its tokens and rate, as `coderoom run`'s status line says them (`record.notes`).

Bounded: record listeners are synchronous and a notification is a send, so the listener keeps
only the latest message and one sender task sends it, at most one each REPORT_EVERY_S; a slow
client misses messages, never holds the run up. Every message is one line made inert
(`content.safe`): a tool's name and a reply's counts come from the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ..models.streaming import REPORT_EVERY_S
from ..record.events import Event, ModelCall, ModelStart, ModelStream, ToolStart
from ..record.notes import stream_text
from . import content

MAX_MESSAGE_CHARS = 200

Send = Callable[[float, str], Awaitable[None]]
"""`send(progress, message)`: `Context.report_progress` (a no-op when the client asked for none)."""


class JobProgress:
    """A record listener (`__call__`) and, while `sending`, the task that tells the client."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._turn = 0
        self._message: str | None = None
        self._count = 0  # MCP progress must increase: one more per message sent
        self._changed = asyncio.Event()

    def __call__(self, event: Event) -> None:
        if isinstance(event, ModelStart):
            self._turn = event.turn
            self._say("waiting for the model")
        elif isinstance(event, ModelStream):
            self._say(f"receiving the reply: {stream_text(event)}")
        elif isinstance(event, ModelCall):
            self._say(f"model answered ({event.usage.output_tokens:,} tokens)")
        elif isinstance(event, ToolStart):
            self._say(event.name)

    def _say(self, doing: str) -> None:
        """One line (a tool's name is the model's: a newline in it would forge a line of its own, R-D3)."""
        self._message = content.safe(" ".join(f"turn {self._turn}: {doing}".split())[:MAX_MESSAGE_CHARS])
        self._changed.set()

    async def sending(self) -> None:
        """Send the latest message whenever there is a new one, at most one each REPORT_EVERY_S
        (cancelled when the run ends); a send that fails ends the sending, never the run."""
        while True:
            await self._changed.wait()
            self._changed.clear()
            if self._message is not None:
                self._count += 1
                try:
                    await self._send(self._count, self._message)
                except Exception:  # the client's stream gone (anyio's, the SDK's own errors): the run goes on unheard
                    return
            await asyncio.sleep(REPORT_EVERY_S)
