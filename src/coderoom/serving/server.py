"""uvicorn as coderoom runs it: on a socket `bind` made, without its own signal handlers, and
shut down without a traceback.

Why no signal handlers of its own: `interrupts.run_interruptible` owns SIGINT/SIGTERM/SIGHUP
for the whole process, so a stopped server closes and saves every session and exits 130/143/129
like a run. It stops the server by cancelling the task that serves.

Why the application's lifespan runs here, not in uvicorn: uvicorn runs it in a task of its own,
which that cancel never reaches; `asyncio.run` cancelled it on the way out and uvicorn logged
the cancel as a traceback ("Exception in 'lifespan' protocol", issue 20). Here it runs in the
serving task: on a signal the application ends first (the page's asks cancelled and sessions
closed, so their event streams end whole; MCP's transports ended), then uvicorn as its own
SIGTERM would (no new connections, open ones asked to end within SHUTDOWN_GRACE_S). A second
signal cancels that end like any other work of the task (a save is cut, as in a run).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator

import uvicorn
from starlette.applications import Starlette

LISTEN_BACKLOG = 128
SHUTDOWN_GRACE_S = 3
"""How long open requests (an event stream, a tool call) get to end once the server stops."""


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handlers: coderoom's (`interrupts`) stop the server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_app(app: Starlette, sock: socket.socket, announce: Callable[[], None]) -> None:
    """Serve `app` on `sock` (bound, not yet listening) until cancelled; `announce()` once it
    listens. The socket is closed on every way out."""
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
    server = QuietServer(config)
    try:
        async with contextlib.AsyncExitStack() as application:
            await application.enter_async_context(app.router.lifespan_context(app))
            sock.listen(LISTEN_BACKLOG)  # before the announcement: an early client waits, never is refused
            announce()
            try:
                await server.serve(sockets=[sock])
            except asyncio.CancelledError:
                await application.aclose()  # the application's own end first
                if server.started:
                    server.handle_exit(signal.SIGTERM, None)  # then what uvicorn's own handler does
                    await server.shutdown(sockets=[sock])
                raise
    finally:
        sock.close()
