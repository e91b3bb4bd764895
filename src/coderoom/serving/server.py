"""uvicorn as coderoom runs it: on a socket `bind` made, without its own signal handlers, and
shut down without a traceback.

Why no signal handlers of its own: `interrupts.run_interruptible` owns SIGINT/SIGTERM/SIGHUP
for the whole process, so a stopped server closes and saves every session and exits 130/143/129
like a run. It stops the server by cancelling the task that serves; uvicorn alone would leave
its lifespan task to be cancelled by `asyncio.run` on the way out, which logs a traceback
("Exception in 'lifespan' protocol"). `serve_app` instead shuts the application down first
(its lifespan: the page's asks cancelled and sessions closed, so their event streams end whole;
MCP's transports ended), then uvicorn as its own SIGTERM would (no new connections, open ones
asked to end within SHUTDOWN_GRACE_S), then the cancel goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator

import uvicorn
from starlette.types import ASGIApp

LISTEN_BACKLOG = 128
SHUTDOWN_GRACE_S = 3.0
"""How long open requests (event streams, a tool call) get to end once the server stops."""


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handlers: coderoom's (`interrupts`) stop the server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_app(app: ASGIApp, sock: socket.socket, announce: Callable[[], None]) -> None:
    """Serve `app` on `sock` (bound, not yet listening) until cancelled; `announce()` once it
    listens. The socket is closed on every way out."""
    server = QuietServer(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=SHUTDOWN_GRACE_S))
    try:
        sock.listen(LISTEN_BACKLOG)  # before the announcement: an early client waits, never is refused
        announce()
        try:
            await server.serve(sockets=[sock])
        except asyncio.CancelledError:
            if server.started:
                await server.lifespan.shutdown()  # first the application's own end: sessions closed, their event streams end
                server.handle_exit(signal.SIGTERM, None)  # then what uvicorn's own handler does
                await server.shutdown(sockets=[sock])
            raise
    finally:
        sock.close()
