"""The page's application (`web.app.build_app` over a `SessionManager`) served by uvicorn in a
thread of the test process, on 127.0.0.1 and a free port, its sessions on a backend handed in:
for tests of the page's sessions, not of the sandbox or of `coderoom serve`'s start-up (those
start the command itself, see `served`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from sse_starlette.sse import AppStatus

from coderoom.service import SessionManager
from coderoom.web.app import WebConfig, build_app
from coderoom.serving.bind import host_headers
from coderoom.web.guard import Secrets
from coderoom.web.live import Choices
from web.served import Endpoint

START_TIMEOUT_S = 30


@contextlib.contextmanager
def served_in_process(runs_dir: Path, backend: Any) -> Iterator[Endpoint]:
    """Serve the offline model and `backend` only until the block ends; then the server stops
    and every live session is closed and saved, as at shutdown."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    secrets_ = Secrets()
    config = WebConfig(runs_dir, Choices(["offline"], [backend.name]), host_headers("127.0.0.1", port), secrets_)
    manager = SessionManager(sandbox=backend.name, backend=backend, model="offline", runs_dir=runs_dir)
    # sse-starlette patches uvicorn's Server.handle_exit to set a process-wide flag that ends every
    # event stream from then on; a server of an earlier test in this process that shut down (as
    # `serving.server` does, through handle_exit) leaves it set, and this server's streams would end
    # at once. A real `coderoom serve` process serves once, so only tests need it cleared.
    AppStatus.should_exit = False
    server = uvicorn.Server(uvicorn.Config(build_app(config, manager), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[listener])), daemon=True)
    thread.start()
    try:
        for _ in range(START_TIMEOUT_S * 20):
            if server.started:
                break
            threading.Event().wait(0.05)
        else:
            raise AssertionError("the in-process server did not start")
        yield Endpoint(port, secrets_.token, runs_dir)
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        listener.close()
