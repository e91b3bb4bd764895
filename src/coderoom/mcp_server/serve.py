"""Run the MCP server: over stdio (the client starts `coderoom mcp`), or over streamable HTTP on
loopback, where every request must carry the server's bearer token.

Why a token even on loopback: any local process (another user's, a browser page through DNS
rebinding) can reach 127.0.0.1; the token (random, `secrets.token_urlsafe(32)`, printed once at
start) is compared in constant time (`hmac.compare_digest`) before the request reaches the MCP
SDK, which also checks the Host and Origin headers (DNS rebinding) against `transport_security`:
the SDK turns that check on by itself only for 127.0.0.1, localhost and ::1, so every loopback
bind (127.0.0.2, ...) gets it explicitly, for the loopback names and the bound address. A non-loopback bind is
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
from mcp.server.transport_security import TransportSecuritySettings

from ..errors import UsageError
from ..service import SessionManager

MAX_HTTP_BODY_BYTES = 48 * 1024**2  # one HTTP request (uploads are base64: 32 MiB decoded)
MCP_PATH = "/mcp"
LISTEN_BACKLOG = 128
LOOPBACK_NAMES = ("localhost",)
LOOPBACK_HOST_HEADERS = ("127.0.0.1", "localhost", "[::1]")


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


def transport_security(host: str, port: int) -> TransportSecuritySettings | None:
    """The SDK's Host/Origin check for a loopback bind: the loopback names and `host`, each with
    `port`. None (the SDK's own choice: off) for a remote bind, where the token is the guard."""
    if not is_loopback(host):
        return None
    names = {*LOOPBACK_HOST_HEADERS, f"[{host}]" if ":" in host else host}
    hosts = sorted(f"{name}:{port}" for name in names)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=[f"http://{h}" for h in hosts],
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
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)  # listening before it is announced: an early client waits, never is refused
    bound = sock.getsockname()[1]
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, max_request_body_size=MAX_HTTP_BODY_BYTES,
        transport_security=transport_security(host, bound),
    )
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
