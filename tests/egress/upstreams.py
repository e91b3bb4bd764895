"""Upstream servers for the egress tests, all on the host's 127.0.0.1 (the only address a test may
reach): an HTTP server that records what it was sent, a raw TCP server that records the first
bytes of each connection, a TLS ClientHello made by Python's ssl for any server name, and a test
CA (`TestCA`) whose certificates an HTTPS upstream (`http_upstream(tls=...)`) shows."""

from __future__ import annotations

import contextlib
import http.server
import socket
import ssl
import threading
import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Seen:
    """What an upstream was sent: (path, headers) of each HTTP request, or raw first bytes."""

    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    port: int = 0


@contextlib.contextmanager
def http_upstream(
    body: bytes = b"hello from upstream\n", redirect_to: str | None = None, tls: ssl.SSLContext | None = None
) -> Iterator[Seen]:
    """An HTTP/1.1 server on 127.0.0.1 (HTTPS with `tls`): `GET /big?n=N` answers N bytes,
    `GET /go` a redirect to `redirect_to`, TRACE (and TRACK) the request it got, anything else
    `body`."""
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

        def do_TRACE(self) -> None:  # as RFC 9110 9.3.8 says, and Apache httpd by default: the request back
            seen.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            reflected = f"{self.requestline}\r\n{self.headers.as_string()}".encode()
            self.send_response(200)
            self.send_header("Content-Type", "message/http")
            self.send_header("Content-Length", str(len(reflected)))
            self.end_headers()
            self.wfile.write(reflected)

        do_TRACK = do_TRACE  # IIS's name for it

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:  # the handshake runs in the handler's thread, on its first read
        server.socket = tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    seen.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def tcp_server(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A TCP server on 127.0.0.1 handing each connection to `handle`, one at a time, on a thread
    of its own until the context ends; its port."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            conn.settimeout(5)
            handle(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


@contextlib.contextmanager
def tcp_recorder() -> Iterator[Seen]:
    """A TCP server on 127.0.0.1 that keeps the first bytes of each connection and closes it."""
    seen = Seen()

    def record(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            seen.raw.append(conn.recv(65536))

    with tcp_server(record) as seen.port:
        yield seen


EARLY_ANSWER = b"too large: not read\n"


@contextlib.contextmanager
def early_answerer(tls: ssl.SSLContext | None = None) -> Iterator[Seen]:
    """An HTTP server on 127.0.0.1 (HTTPS with `tls`) that answers each request from its head
    alone, before any of its body (`413` with EARLY_ANSWER, `Connection: close`), then reads
    nothing more and keeps the connection open until the test ends: a server that refuses an
    upload it never reads. `seen.raw` keeps each request head."""
    seen, held = Seen(), []

    def answer(conn: socket.socket) -> None:
        held.append(conn)
        head = b""
        with contextlib.suppress(OSError):
            if tls is not None:
                conn = tls.wrap_socket(conn, server_side=True)
                held.append(conn)
            while b"\r\n\r\n" not in head and len(head) < 65536:
                head += conn.recv(1)  # byte by byte: not one byte of the body is read
            seen.raw.append(head)
            conn.sendall(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(EARLY_ANSWER), EARLY_ANSWER))

    try:
        with tcp_server(answer) as seen.port:
            yield seen
    finally:
        for conn in held:
            conn.close()


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


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


class TestCA:
    """A CA of the test's own (no name constraints) that signs server certificates for upstreams."""

    __test__ = False  # not a test class

    def __init__(self, folder: Path, name: str = "egress test CA") -> None:
        self.folder = folder
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self._valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(hours=2))
        self.certificate = (
            x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self._valid[0]).not_valid_after(self._valid[1])
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        self.cafile = folder / f"{name.replace(' ', '-')}.pem"
        self.cafile.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context showing a certificate for `host` signed by this CA."""
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            x509.CertificateBuilder().subject_name(_name(host)).issuer_name(self.certificate.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self._valid[0]).not_valid_after(self._valid[1])
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        return server_context(certificate.public_bytes(serialization.Encoding.PEM), key, self.folder, host)


def server_context(certificate: bytes, key: ec.EllipticCurvePrivateKey, folder: Path, host: str) -> ssl.SSLContext:
    """A TLS server context for a certificate and key (written to `folder`: test material)."""
    pem = folder / f"{host}-{x509.load_pem_x509_certificate(certificate).serial_number}.pem"
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    pem.write_bytes(private + certificate)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pem)
    return context
