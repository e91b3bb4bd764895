"""Run the MCP server: over stdio (the client starts `coderoom mcp`), or over streamable HTTP on
loopback, where every request must carry the server's bearer token.

Why a token even on loopback: any local process (another user's, a browser page through DNS
rebinding) can reach 127.0.0.1; the token (random, `secrets.token_urlsafe(32)`, printed once at
start) is compared in constant time (`hmac.compare_digest`) before the request reaches the MCP
SDK, which also checks the Host and Origin headers (DNS rebinding). A non-loopback bind is
refused unless `allow_remote` is given. The token never reaches a sandbox: sessions get only
their files and the allowlisted environment every sandbox gets.

Shutdown (stdin closed, SIGINT, SIGTERM, SIGHUP): every live session is closed and saved as a
run folder and the warm pool's sandboxes are closed, so nothing is left behind.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer

from ..errors import UsageError
from ..service import SessionManager

MAX_HTTP_BODY_BYTES = 48 * 1024**2  # one HTTP request (uploads are base64: 32 MiB decoded)
MCP_PATH = "/mcp"
LISTEN_BACKLOG = 128
LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, allow_remote: bool) -> None:
    if not is_loopback(host) and not allow_remote:
        raise UsageError(
            f"--host {host}: not a loopback address; the MCP server listens on loopback only "
            "unless --allow-remote is given (then anyone who can reach it and has the token can run code)"
        )


class BearerToken:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"text/plain"), (b"www-authenticate", b'Bearer realm="coderoom"')]})
                await send({"type": "http.response.body", "body": b"a bearer token is required\n"})
                return
        await self.app(scope, receive, send)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: coderoom's (`interrupts`) stop the server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_stdio(server: MCPServer, manager: SessionManager) -> None:
    async with manager:
        if manager.pool is not None:
            await manager.pool.start()
        await server.run_stdio_async()


async def serve_http(
    server: MCPServer, manager: SessionManager, *, host: str, port: int, token: str,
    announce: Callable[[str], None],
) -> None:
    """Serve until cancelled (a signal); `announce(url)` once the socket listens."""
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, max_request_body_size=MAX_HTTP_BODY_BYTES
    )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)  # listening before it is announced: an early client waits, never is refused
    bound = sock.getsockname()[1]
    config = uvicorn.Config(BearerToken(app, token), log_level="warning", lifespan="on")
    async with manager:
        if manager.pool is not None:
            await manager.pool.start()
        shown = f"[{host}]" if ":" in host else host
        announce(f"http://{shown}:{bound}{MCP_PATH}")
        try:
            await _Server(config).serve(sockets=[sock])
        finally:
            sock.close()
