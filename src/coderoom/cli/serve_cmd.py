"""`coderoom serve`: the web page over live sessions and past runs (`coderoom.web`).

It listens on 127.0.0.1 unless told otherwise; a non-loopback address needs `--allow-remote`,
and the token is required whatever the address. The URL with the token is printed once, as
Jupyter does; opening it trades the token for a cookie. Bad flags, an address that cannot be
bound and a model spec that does not resolve are usage errors (exit 2) found before any session.
"""

from __future__ import annotations

import contextlib
import ipaddress
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import UsageError
from .app import app
from .errors import reported

DEFAULT_PORT = 8765
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on; non-loopback needs --allow-remote")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (0: any free one)")] = DEFAULT_PORT,
    runs_dir: Annotated[Path, typer.Option(help="where session runs are written and past runs are read")] = Path("runs"),
    model: Annotated[Optional[list[str]], typer.Option(help="a model the page offers (repeat; the first is the default; offline is always offered)")] = None,
    sandbox: Annotated[Optional[list[str]], typer.Option(help="a sandbox backend the page offers (repeat; the first is the default)")] = None,
    allow_remote: Annotated[bool, typer.Option(help="allow a non-loopback --host (the token is still required)")] = False,
    public_host: Annotated[Optional[list[str]], typer.Option(help="a host name the page is reached by besides loopback (repeat)")] = None,
) -> None:
    """Serve the web page: upload files, ask, watch the run live, browse past runs."""
    with reported():
        listener = _listen(host, port, allow_remote)
        choices = _choices(model or [], sandbox or [])
    _serve(listener, host, runs_dir, choices, public_host or [])


def _listen(host: str, port: int, allow_remote: bool) -> socket.socket:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(f"--host {host!r}: give an IP address (127.0.0.1, ::1, or with --allow-remote another)") from None
    if not address.is_loopback and not allow_remote:
        raise UsageError(f"--host {host} is not a loopback address: add --allow-remote to listen there (the token is still required)")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: not a port number")
    listener = socket.socket(socket.AF_INET6 if address.version == 6 else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    listener.listen(128)
    return listener


def _choices(models: list[str], sandboxes: list[str]):  # noqa: ANN202  (web.live.Choices)
    from ..models.resolve import resolve_model
    from ..sandboxes import backend_names, get_backend
    from ..web.live import Choices
    from ..web.options import default_models

    offered = default_models(models)
    for spec in offered:
        resolve_model(spec)  # a spec that cannot resolve is a usage error now, not in the page
    for name in sandboxes:
        get_backend(name)
    return Choices(models=offered, sandboxes=list(dict.fromkeys(sandboxes)) or backend_names())


def _serve(listener: socket.socket, host: str, runs_dir: Path, choices, public_hosts: list[str]) -> None:  # noqa: ANN001
    import asyncio

    import uvicorn

    from ..service import SessionManager
    from ..web.app import WebConfig, build_app
    from ..web.guard import Secrets, allowed_hosts

    port = listener.getsockname()[1]
    secrets_ = Secrets()
    config = WebConfig(runs_dir=runs_dir, choices=choices, hosts=allowed_hosts(host, port, public_hosts), secrets=secrets_)
    web_app = build_app(config, SessionManager())
    shown = f"[{host}]" if ":" in host else host
    print(f"coderoom serve: http://{shown}:{port}/?token={secrets_.token}", flush=True)
    server = _server_class()(uvicorn.Config(web_app, log_level="warning", lifespan="on"))
    asyncio.run(server.serve(sockets=[listener]))
    if server.received is not None:  # shut down by a signal: every session was saved and closed
        raise typer.Exit(128 + server.received)


def _server_class():  # noqa: ANN202  (a uvicorn.Server subclass; uvicorn loads when serving)
    import uvicorn

    class SignalledServer(uvicorn.Server):
        """uvicorn's server, but a signal ends it with coderoom's exit code (130, 143, 129)
        instead of being raised again after shutdown."""

        received: int | None = None

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            previous = {sig: signal.signal(sig, self._signalled) for sig in SIGNALS}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def _signalled(self, sig: int, frame: Any) -> None:
            if self.received is None:
                self.received = sig
            self.handle_exit(sig, frame)  # a second SIGINT forces the exit, as uvicorn's own

    return SignalledServer
