"""Upstream servers for the egress tests, all on the host's 127.0.0.1 (the only address a test may
reach): an HTTP server that records what it was sent, a raw TCP server that records the first
bytes of each connection, and a TLS ClientHello made by Python's ssl for any server name."""

from __future__ import annotations

import contextlib
import http.server
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Seen:
    """What an upstream was sent: (path, headers) of each HTTP request, or raw first bytes."""

    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    port: int = 0


@contextlib.contextmanager
def http_upstream(body: bytes = b"hello from upstream\n", redirect_to: str | None = None) -> Iterator[Seen]:
    """An HTTP/1.1 server on 127.0.0.1: `GET /big?n=N` answers N bytes, `GET /go` a redirect to
    `redirect_to`, anything else `body`."""
    seen = Seen()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            seen.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            if self.path == "/go" and redirect_to:
                self.send_response(302)
                self.send_header("Location", redirect_to)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            payload = b"x" * int(self.path.split("n=")[1]) if self.path.startswith("/big") else body
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            data = self.rfile.read(length)
            seen.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    seen.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def tcp_recorder() -> Iterator[Seen]:
    """A TCP server on 127.0.0.1 that keeps the first bytes of each connection and closes it."""
    seen = Seen()
    server = socket.create_server(("127.0.0.1", 0))
    seen.port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    seen.raw.append(conn.recv(65536))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()
        server.close()


def client_hello(server_hostname: str | None) -> bytes:
    """The ClientHello Python's ssl sends for `server_hostname` (None: no SNI)."""
    context = ssl.create_default_context()
    if server_hostname is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()
