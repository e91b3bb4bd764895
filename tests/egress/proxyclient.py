"""The host proxy on its socket, driven as a sandbox would drive it: `running` starts one in a
test's folder, `Running.send` plays the sandbox's side of one connection, `get` writes a proxy
request head, `https_through` a request inside HTTPS through the proxy, `intercepting` an HTTPS upstream
behind a proxy holding its secret. Shared by tests/egress and the egress fault tests (one copy)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

from coderoom.egress.policy import parse_policy
from coderoom.egress.proxy import Attempt, Budget, Proxy

from .upstreams import Seen, TestCA, http_upstream

SECRET = {"host": "api.test", "header": "Authorization", "env": "TOKEN", "format": "Bearer {}"}


class Running:
    """A proxy on its socket in `tmp_path`, and the attempts it reported."""

    def __init__(self, proxy: Proxy, events: list[Attempt], *, reset_ok: bool = False) -> None:
        self.proxy, self.events, self.reset_ok = proxy, events, reset_ok

    async def send(self, data: bytes, *, then: bytes = b"") -> bytes:
        """Send `data` (and, once the proxy answered, `then`); everything the proxy sent back.
        A connection reset fails the test unless `reset_ok` (the proxy may close with the
        sandbox's bytes unread, which an attack expects)."""
        reader, writer = await asyncio.open_unix_connection(str(self.proxy.socket_path))
        writer.write(data)
        if then:
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
            writer.write(then)
        else:
            answer = b""
        try:
            answer += await asyncio.wait_for(reader.read(), 30)
        except ConnectionResetError:
            if not self.reset_ok:
                raise
        finally:
            writer.close()
        await asyncio.sleep(0.05)  # the proxy reports the attempt once the connection ends
        return answer


async def running(
    tmp_path: Path, table: dict[str, object], *, max_bytes: int = 10**9, max_connections: int = 100,
    environ: dict[str, str] | None = None, reset_ok: bool = False, **options: object,
) -> Running:  # fmt: skip
    """A started proxy for the policy `table`; `options` go to `Proxy` as they are."""
    events: list[Attempt] = []
    proxy = Proxy(
        parse_policy(table, source="test"), tmp_path / "proxy.sock", Budget(max_bytes, max_connections),
        events.append, environ=environ or {}, **options,  # type: ignore[arg-type]
    )  # fmt: skip
    await proxy.start()
    return Running(proxy, events, reset_ok=reset_ok)


def get(target: str, host: str, extra: str = "") -> bytes:
    """A proxy request head: `GET target` with `Host: host` and `extra` header lines."""
    return f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def https_through(proxy: Running, host: str, port: int, request: bytes, *, cafile: Path | None = None, pem: bytes = b"") -> tuple[bytes, dict[str, object]]:
    """As a sandbox would: CONNECT host:port on the proxy's socket, TLS trusting `cafile` or
    `pem`, then `request`; (everything answered, the server's certificate)."""
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(30)
        raw.connect(str(proxy.proxy.socket_path))
        raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = raw.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
        context = ssl.create_default_context(cafile=str(cafile) if cafile else None, cadata=pem.decode() if pem else None)
        with context.wrap_socket(raw, server_hostname=host) as tls:
            peer = tls.getpeercert()
            tls.sendall(request)
            answer = b""
            while chunk := tls.recv(65536):
                answer += chunk
    return answer, peer or {}


@contextlib.asynccontextmanager
async def intercepting(
    tmp_path: Path, token: str, *, secret: dict[str, object] = SECRET, shown_by: TestCA | None = None
) -> AsyncIterator[tuple[Seen, Running]]:
    """An HTTPS upstream for api.test on 127.0.0.1 (its certificate from a test CA, or from
    `shown_by`) and a started proxy allowing it whose `secret` is $TOKEN=`token`, trusting that
    test CA upstream: so the proxy intercepts. The proxy is closed on leaving."""
    test_ca = TestCA(tmp_path)
    with http_upstream(tls=(shown_by or test_ca).server_context("api.test")) as seen:
        table = {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}, "secrets": [secret]}
        proxy = await running(tmp_path, table, environ={"TOKEN": token}, upstream_cafile=test_ca.cafile)
        assert proxy.proxy.ca is not None
        try:
            yield seen, proxy
        finally:
            await proxy.proxy.close()
