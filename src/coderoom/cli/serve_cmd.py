"""`coderoom serve`: the web page over live sessions and past runs (`coderoom.web`).

Serving itself (the loopback rule, the token, Host and Origin checks, uvicorn, preparing the
offered backends before listening) is `coderoom.serving`'s, shared with `coderoom mcp --http`.
It listens on 127.0.0.1 unless told otherwise; a non-loopback address needs `--allow-remote`,
and the token is required whatever the address. The URL with the token is printed once, as
Jupyter does, in the fragment (`/#token=...`, which no browser sends to a server); the page
sends it as an Authorization header, never a cookie. Bad flags, an address that cannot be
bound and a model spec that does not resolve are usage errors (exit 2) found before any session.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from ..errors import UsageError
from ..sandboxes.flags import SandboxFlags
from ..serving.bind import bind, host_headers, shown_host
from . import service_options as options
from .application import app
from .display import safe
from .errors import reported
from .limit_option import Limit

console = Console(stderr=True)

DEFAULT_PORT = 8780  # not coderoom mcp's 8765: both can run side by side


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on; non-loopback needs --allow-remote")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (0: any free one)")] = DEFAULT_PORT,
    runs_dir: Annotated[Path, typer.Option(help="where session runs are written and past runs are read")] = Path("runs"),
    model: Annotated[Optional[list[str]], typer.Option(help="a model the page offers (repeat; the first is the default; offline is always offered)")] = None,
    sandbox: Annotated[Optional[list[str]], typer.Option(help="a sandbox backend the page offers (repeat; the first is the default)")] = None,
    allow_remote: Annotated[bool, typer.Option(help="allow a non-loopback --host (the token is still required)")] = False,
    public_host: Annotated[Optional[list[str]], typer.Option(help="a host name the page is reached by besides loopback (repeat)")] = None,
    max_sessions: Annotated[int, typer.Option(help="live sessions at once; more are refused (429)")] = 8,
    memory: options.Memory = None,
    timeout: options.Timeout = None,
    limit: Limit = [],
    allow_host: options.AllowHost = [],
    resolve: options.Resolve = [],
    package: options.Package = [],
    idle_timeout: options.IdleTimeout = options.IDLE_TIMEOUT_DEFAULT_S,
    pool: Annotated[int, typer.Option(help=f"of the default sandbox: {options.POOL_HELP}")] = 0,
    pool_max_idle: options.PoolMaxIdle = options.POOL_MAX_IDLE_DEFAULT_S,
    ray: options.Ray = None,
) -> None:
    """Serve the web page: upload files, ask, watch the run live, browse past runs."""
    from ..interrupts import raising_on_signals
    from ..serving.backends import prepare_backends

    with raising_on_signals(), reported():
        if max_sessions < 1:
            raise UsageError(f"--max-sessions {max_sessions}: at least 1")
        flags = SandboxFlags(limit, {"memory": memory, "timeout": timeout}, allow_host, resolve, package)
        limits, environment = flags.limits(), flags.environment() if package else None
        options.check_pool(pool, pool_max_idle, idle_timeout)
        choices = _choices(model or [], sandbox or [])
        sock = bind(host, port, allow_remote)
        opener = options.ray_opener(ray)
        if opener is None:  # with --ray each node prepares its own backend
            prepare_backends(choices.sandboxes, limits, lambda line: console.print(safe(line)), environment)
    sessions = Sessions(max_sessions, limits, environment, idle_timeout, pool, pool_max_idle, opener)
    _serve(sock, host, runs_dir, choices, public_host or [], sessions)


@dataclass(frozen=True)
class Sessions:
    """What every session of this server gets: the cap, the limits, the declared packages
    (`--package`; None: none), the idle timeout, the pool."""

    max_sessions: int
    limits: Any
    environment: Any
    idle_timeout_s: float
    pool: int
    pool_max_idle_s: float
    opener: Any  # `ray_session.RayOpener` with --ray, else None (in this process)


def _choices(models: list[str], sandboxes: list[str]):  # noqa: ANN202  (web.live.Choices)
    """What the page may choose: each model spec resolved once (a bad one is exit 2 now), and the
    backends given, each able to run here; by default every backend that can."""
    import asyncio

    from ..models.resolve import resolve_model
    from ..sandboxes import backend_names, get_backend
    from ..sandboxes.spec import SandboxSpec
    from ..web.live import Choices
    from ..web.options import default_models

    offered = default_models(models)
    for spec in offered:
        asyncio.run(resolve_model(spec).aclose())
    reasons = {name: get_backend(name).unavailable_reason(SandboxSpec(backend=name)) for name in sandboxes or backend_names()}
    for name in sandboxes:
        if reasons[name] is not None:
            raise UsageError(f"--sandbox {name}: {reasons[name]}")
    usable = [name for name, reason in reasons.items() if reason is None]
    if not usable:
        raise UsageError("no sandbox backend can run here: " + "; ".join(f"{n}: {r}" for n, r in reasons.items()))
    return Choices(models=offered, sandboxes=list(dict.fromkeys(usable)))


def _serve(sock: socket.socket, host: str, runs_dir: Path, choices, public_hosts: list[str], sessions: Sessions) -> None:  # noqa: ANN001
    """Serve until a signal; then every live session is closed and saved, and the exit code is
    the signal's (130, 143, 129), as a run's (`interrupts`)."""
    import asyncio

    from ..interrupts import Interrupted, exit_now, raising_on_signals, run_interruptible

    with raising_on_signals():
        try:
            asyncio.run(run_interruptible(_serve_until_cancelled(sock, host, runs_dir, choices, public_hosts, sessions)))
        except Interrupted as exc:
            print(f"coderoom serve: {exc.message}; every live session was closed and saved under {runs_dir}", flush=True)
            exit_now(exc.exit_code)


async def _serve_until_cancelled(
    sock: socket.socket, host: str, runs_dir: Path, choices: Any, public_hosts: list[str], sessions: Sessions
) -> None:
    from ..sandboxes.spec import SandboxSpec
    from ..service import SessionManager
    from ..serving.server import serve_app
    from ..web.app import WebConfig, build_app
    from ..web.guard import Secrets

    port = sock.getsockname()[1]
    secrets_ = Secrets()
    config = WebConfig(runs_dir=runs_dir, choices=choices, hosts=host_headers(host, port, public_hosts), secrets=secrets_)
    default_sandbox = choices.sandboxes[0]
    spec = SandboxSpec(backend=default_sandbox, limits=sessions.limits)
    if sessions.environment is not None:
        spec = spec.model_copy(update={"environment": sessions.environment})
    warm = options.warm_pool(sessions.pool, sessions.pool_max_idle_s, spec, on_ray=sessions.opener is not None)
    async with SessionManager(
        runs_dir=runs_dir, max_sessions=sessions.max_sessions, idle_timeout_s=sessions.idle_timeout_s,
        limits=sessions.limits, environment=sessions.environment, sandbox=default_sandbox, pool=warm,
        opener=sessions.opener,
    ) as manager:
        if warm is not None:
            await warm.start()

        def announce() -> None:
            print(f"coderoom serve: http://{shown_host(host)}:{port}/#token={secrets_.token}", flush=True)

        await serve_app(build_app(config, manager), sock, announce)
