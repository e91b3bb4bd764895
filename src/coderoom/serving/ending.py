"""Ending the requests still in flight when a coderoom server stops, cleanly (attacks A3-S8 and
A3-S9, docs/security.md).

Why: uvicorn ends a request that outlives its shutdown grace by cancelling its task, and
`asyncio.run` cancels whatever is left on the way out; either cancel surfaced in the
application (Starlette's form parser waiting for the rest of an upload, the MCP SDK's
transport waiting for a body or holding an event stream) and uvicorn logged it as
"Exception in ASGI application" with a traceback and answered 500. `RequestGate` wraps the
application: once the server stops, a request it ends (`end_all`), or one whose own
application code was cancelled by the application's end (MCP's transports), answers 503 and
closes, or, when its response had started, ends that response whole; nothing is logged.
"""

from __future__ import annotations

import asyncio

from starlette.types import ASGIApp, Message, Receive, Scope, Send

STOPPING_REPLY = b"the server is stopping\n"


class _Reply:
    """The ASGI `send` of one request, remembering how far the response went."""

    def __init__(self, send: Send) -> None:
        self.downstream = send
        self.started = False
        self.complete = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True
        await self.downstream(message)

    async def end(self) -> None:
        """Finish what the request left: a 503 if nothing was sent, else the response's end."""
        if self.complete:
            return
        if not self.started:
            await self.send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close"),
                (b"content-length", str(len(STOPPING_REPLY)).encode())]})
            await self.send({"type": "http.response.body", "body": STOPPING_REPLY})
        else:
            await self.send({"type": "http.response.body", "body": b""})


class RequestGate:
    """Tracks the HTTP requests in flight so that a stopping server ends them cleanly."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.stopping = False
        self.in_flight: set[asyncio.Task[object]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        task = asyncio.current_task()
        assert task is not None
        reply = _Reply(send)
        self.in_flight.add(task)
        try:
            await self.app(scope, receive, reply.send)
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            _uncancel(task)
            await reply.end()
        finally:
            self.in_flight.discard(task)

    def stop(self) -> None:
        """From now on a cancelled request is the server's stop, answered rather than logged."""
        self.stopping = True

    def end_all(self) -> None:
        """End every request still in flight (past the shutdown grace)."""
        self.stop()
        for task in self.in_flight:
            task.cancel()


def _uncancel(task: asyncio.Task[object]) -> None:
    """Take back the cancels of `task`, so the reply can still be written; the request ends
    right after, so nothing else of the task runs on uncancelled."""
    while task.cancelling():
        task.uncancel()
