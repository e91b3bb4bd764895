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
SIGTERM would (no new connections, open ones asked to end within SHUTDOWN_GRACE_S); a request
still in flight after the grace is ended by `ending.RequestGate` (503 and close, or its response
ended whole), never by uvicorn's cancel, which logged a traceback (A3-S8/S9). A second signal
cancels that end like any other work of the task (a save is cut, as in a run).

Connections are bounded by `connections` (a head deadline, a cap under the open-files limit,
raised to the hard one; an exhausted accept() reported in one line), against A3-S6.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator

import uvicorn
from starlette.applications import Starlette

from .connections import AcceptErrorReporter, HeadDeadlineProtocol, connection_cap, raise_open_files_limit
from .ending import RequestGate

LISTEN_BACKLOG = 128
SHUTDOWN_GRACE_S = 3
"""How long open requests (an event stream, a tool call) get to end once the server stops."""
ENDED_REQUESTS_GRACE_S = 1
"""How long the requests ended after the grace get to send their last bytes and close."""


class QuietServer(uvicorn.Server):
    """uvicorn without its own signal handlers: coderoom's (`interrupts`) stop the server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_app(app: Starlette, sock: socket.socket, announce: Callable[[], None]) -> None:
    """Serve `app` on `sock` (bound, not yet listening) until cancelled; `announce()` once it
    listens. The socket is closed on every way out."""
    gate = RequestGate(app)
    config = uvicorn.Config(
        gate, log_level="warning", lifespan="off", http=HeadDeadlineProtocol,
        limit_concurrency=connection_cap(raise_open_files_limit()), timeout_graceful_shutdown=None,
    )
    server = QuietServer(config)
    loop = asyncio.get_running_loop()
    earlier_handler = loop.get_exception_handler()
    loop.set_exception_handler(AcceptErrorReporter())
    try:
        async with contextlib.AsyncExitStack() as application:
            await application.enter_async_context(app.router.lifespan_context(app))
            sock.listen(LISTEN_BACKLOG)  # before the announcement: an early client waits, never is refused
            announce()
            try:
                await server.serve(sockets=[sock])
            except asyncio.CancelledError:
                gate.stop()
                await application.aclose()  # the application's own end first
                if server.started:
                    server.handle_exit(signal.SIGTERM, None)  # then what uvicorn's own handler does
                    await _shut_down(server, gate, sock)
                raise
    finally:
        sock.close()
        loop.set_exception_handler(earlier_handler)


async def _shut_down(server: QuietServer, gate: RequestGate, sock: socket.socket) -> None:
    """uvicorn's shutdown, with the grace's end ours: past SHUTDOWN_GRACE_S the requests still
    in flight are ended by `gate`, and past ENDED_REQUESTS_GRACE_S more the server stops waiting."""
    ending = asyncio.ensure_future(server.shutdown(sockets=[sock]))
    try:
        await asyncio.wait({ending}, timeout=SHUTDOWN_GRACE_S)
        if not ending.done():
            gate.end_all()
            await asyncio.wait({ending}, timeout=ENDED_REQUESTS_GRACE_S)
        server.force_exit = True
        await ending
    finally:
        ending.cancel()  # a second signal: the shutdown is not left running unowned
