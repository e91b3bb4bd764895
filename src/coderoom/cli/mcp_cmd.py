"""`coderoom mcp`: serve live sandbox sessions to an MCP client (stdio, or HTTP on loopback).

Over stdio, stdout is the protocol: everything for a person goes to stderr. Over HTTP the
bearer token is printed once on stderr at start; clients send it as `Authorization: Bearer`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from ..errors import UsageError
from ..sandboxes.flags import SandboxFlags
from ..sandboxes import backend_names, get_backend
from ..sandboxes.defaults import default_backend_name
from ..serving.bind import bind, check_bind
from . import service_options as options
from .application import app
from .errors import reported
from .limit_option import Limit
from ..mcp_server import RECONNECT_GRACE_S

console = Console(stderr=True)

DEFAULT_PORT = 8765


@app.command()
def mcp(
    http: Annotated[bool, typer.Option("--http", help="serve streamable HTTP on loopback (default: stdio)")] = False,
    host: Annotated[str, typer.Option(help="HTTP address to listen on (loopback only unless --allow-remote)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port (0: any free port)")] = DEFAULT_PORT,
    allow_remote: Annotated[bool, typer.Option("--allow-remote", help="allow a non-loopback --host")] = False,
    allow_read: Annotated[list[Path], typer.Option("--allow-read", help="a host folder whose files clients may copy into sessions")] = [],
    model: Annotated[Optional[str], typer.Option(help="the model for run_job (OpenAI name, openai-compatible:MODEL@URL, offline)")] = None,
    sandbox: Annotated[Optional[str], typer.Option(help=f"sandbox backend: {' | '.join(backend_names())}")] = None,
    memory: options.Memory = None,
    timeout: options.Timeout = None,
    limit: Limit = [],
    allow_host: options.AllowHost = [],
    resolve: options.Resolve = [],
    package: options.Package = [],
    max_sessions: Annotated[int, typer.Option(help="live sessions at once")] = 8,
    idle_timeout: options.IdleTimeout = options.IDLE_TIMEOUT_DEFAULT_S,
    client_grace: Annotated[float, typer.Option(help="--http: seconds the sessions of a client that went away (dropped call, event stream or MCP session) wait for it to come back before they are closed and saved")] = RECONNECT_GRACE_S,
    pool: options.Pool = 0,
    pool_max_idle: options.PoolMaxIdle = options.POOL_MAX_IDLE_DEFAULT_S,
    runs: Annotated[Path, typer.Option(help="where session and job run folders go")] = Path("runs"),
    ray: options.Ray = None,
    print_config: Annotated[bool, typer.Option("--print-config", help="print an MCP client's configuration for these options (absolute paths) and exit")] = False,
) -> None:
    """Serve coderoom sessions over MCP: open_session, run_python, exec, files, close, run_job.

    SIGINT, SIGTERM and SIGHUP close every session (saved as run folders) and the pool; exit
    130 / 143 / 129.
    """
    if print_config:
        from ..mcp_server.client_config import render, server_args

        typer.echo(render(server_args(allow_read=allow_read, runs=runs, model=model, sandbox=sandbox, memory=memory,
                                      timeout=timeout, limits=limit, allow_hosts=allow_host, resolves=resolve, packages=package,
                                      ray=ray)))
        return
    import asyncio

    from ..interrupts import Interrupted, exit_now, raising_on_signals, run_interruptible

    with raising_on_signals(), reported():
        from ..sandboxes.spec import SandboxSpec

        backend = sandbox or default_backend_name()
        if backend not in backend_names():
            raise UsageError(f"--sandbox {backend!r}: choose one of {', '.join(backend_names())}")
        flags = SandboxFlags(limit, {"memory": memory, "timeout": timeout}, allow_host, resolve, package)
        limits, environment = flags.limits(), flags.environment()
        options.check_pool(pool, pool_max_idle, idle_timeout)
        if not client_grace >= 0:
            raise UsageError(f"--client-grace {client_grace:g}: give 0 or more seconds")
        spec = SandboxSpec(backend=backend, limits=limits, environment=environment)
        reason = get_backend(backend).unavailable_reason(spec)
        if reason is not None:
            raise UsageError(reason)
        if http:
            check_bind(host, allow_remote)
        # the server's own modules (the Agents SDK among them) only once the flags are known good
        from ..mcp_server.policy import ReadPolicy
        from ..mcp_server.presence import Presence
        from ..mcp_server.serve import serve_http, serve_stdio
        from ..mcp_server.tools import ServerSettings, build_server
        from ..models import resolve_model
        from ..service import SessionManager
        from ..serving.backends import prepare_backends
        from ..serving.guard import new_token

        asyncio.run(resolve_model(model, environ=dict(os.environ)).aclose())  # a bad spec: exit 2 now
        with ReadPolicy(allow_read) as policy:  # the roots stay open until the server stops (SVC-M1)
            sock = bind(host, port, allow_remote) if http else None  # a taken port: exit 2, before any session
            opener = options.ray_opener(ray)
            cluster = options.ray_jobs(runs) if opener is not None else None  # run_job on the cluster too
            if cluster is None:  # with --ray each node prepares its own backend
                prepare_backends([backend], limits, lambda line: console.print(Text(line)), environment)
            warm = options.warm_pool(pool, pool_max_idle, spec, on_ray=opener is not None)
            manager = SessionManager(max_sessions=max_sessions, idle_timeout_s=idle_timeout, limits=limits,
                                     environment=environment if package else None, sandbox=backend, model=model,
                                     runs_dir=runs, pool=warm, opener=opener)
            server = build_server(manager, ServerSettings(model, backend, limits, runs, policy, environment if package else None, cluster), Presence(manager, client_grace))
            try:
                if sock is not None:
                    token = new_token()

                    def announce(url: str) -> None:
                        console.print(Text(f"coderoom mcp: listening on {url}"))
                        console.print(Text(f"token: {token}  (send it as: Authorization: Bearer <token>)"))

                    asyncio.run(run_interruptible(serve_http(server, manager, sock=sock, token=token, announce=announce)))
                else:
                    asyncio.run(run_interruptible(serve_stdio(server, manager)))
            except Interrupted as exc:
                console.print(Text(f"{exc.message}; every session was closed and saved under {runs}"))
                exit_now(exc.exit_code)
