"""Run the MCP server: over stdio (the client starts `coderoom mcp`), or over streamable HTTP,
where every request must carry the server's bearer token.

Serving over HTTP is `coderoom.serving`'s, shared with the page (`coderoom serve`): the loopback
rule (a non-loopback bind needs `allow_remote`), the token (random, printed once at start,
compared in constant time before a request reaches the MCP SDK), and on a loopback bind the Host
and Origin checks against DNS rebinding, for the loopback names and the bound address (the SDK's
own check is turned off: one place for the rule). Why a token even on loopback: any local
process (another user's, a browser page through DNS rebinding) can reach 127.0.0.1. The token
never reaches a sandbox: sessions get only their files and the allowlisted environment every
sandbox gets.

A client that vanishes over HTTP (its request dropped, its event stream gone, its MCP session
ended) has its call cancelled and its sessions closed after a grace: `presence`.

Shutdown (stdin closed, SIGINT, SIGTERM, SIGHUP): every live session is closed and saved as a
run folder and the warm pool's sandboxes are closed, so nothing is left behind.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from ..service import SessionManager
from ..serving.bind import host_headers, is_loopback, shown_host
from ..serving.guard import guarded
from ..serving.server import serve_app
from .presence import Watch
from .tools import CoderoomServer

MAX_HTTP_BODY_BYTES = 48 * 1024**2  # one HTTP request (uploads are base64: 32 MiB decoded)
MCP_PATH = "/mcp"
SDK_HOST_CHECK_OFF = TransportSecuritySettings(enable_dns_rebinding_protection=False)
"""The SDK's own Host/Origin check, off: `coderoom.serving.guard` does it for every server."""


async def serve_stdio(server: MCPServer, manager: SessionManager) -> None:
    async with manager:
        if manager.pool is not None:
            await manager.pool.start()
        await server.run_stdio_async()


def http_app(server: CoderoomServer, *, host: str, port: int, token: str) -> Starlette:
    """The SDK's streamable HTTP app behind the shared guard: the token always; Host and Origin
    on a loopback bind (a remote one has no names to check against; the token is its guard).
    Inside the guard, `presence.Watch` tells a client's dropped request."""
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, max_request_body_size=MAX_HTTP_BODY_BYTES,
        transport_security=SDK_HOST_CHECK_OFF,
    )
    app.add_middleware(Watch, presence=server.presence)
    app.add_middleware(guarded, token=token, hosts=host_headers(host, port) if is_loopback(host) else None)
    return app


async def serve_http(
    server: CoderoomServer, manager: SessionManager, *, sock: socket.socket, token: str, announce: Callable[[str], None],
) -> None:
    """Serve on `sock` (bound by `serving.bind`) until cancelled (a signal); `announce(url)` once
    it listens."""
    host, port = sock.getsockname()[:2]
    app = http_app(server, host=host, port=port, token=token)
    async with manager:
        if manager.pool is not None:
            await manager.pool.start()
        await serve_app(app, sock, lambda: announce(f"http://{shown_host(host)}:{port}{MCP_PATH}"))
