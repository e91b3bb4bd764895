"""The one enforcement point of an allowlisted sandbox: an HTTP proxy on a Unix socket on the host.

The sandbox has no network of its own (only lo); its forwarder (`inside/forwarder`) hands each
TCP connection to this socket. Everything read from it is hostile, so a request head is parsed
by h11 with its size bound (MAX_HEAD_BYTES) and a deadline (HEAD_TIMEOUT_S), and every name goes
through `policy.host_of` before it is looked at. For each connection:

* `CONNECT host:port` (HTTPS): the allowlist is checked, the name resolved here (the user's
  `resolve` first, else getaddrinfo; a name that resolves only to loopback, private, link-local,
  metadata or multicast addresses is refused), then the ClientHello is read: its SNI must be the
  CONNECT host (a missing or other SNI is refused, so is anything that is not TLS: no chained
  CONNECT or other protocol through the tunnel). Only then does the proxy connect, to the address
  it resolved (no second lookup a rebinding DNS could answer differently), and relay bytes.
  For a host with a secret the proxy terminates that TLS itself instead (`interception`: a
  leaf for the host, signed by the session's own CA, which the sandbox trusts), reads the
  HTTP/1.1 request inside with h11 as it does plain HTTP (its Host must be the host), sets the
  secret's header and sends it to the host over a new TLS connection verified against the
  normal trust store (plus the host-only `upstream_cafile`). One request per connection.
* absolute-form `GET http://host[:port]/path` (plain HTTP): the Host header must name the same
  host and port; the request is sent upstream in origin form with hop-by-hop and proxy headers
  dropped, the secret's header (if the host has one, and it allows plain HTTP: `plain_http`;
  else the request is refused) set from the host's environment, and
  `Connection: close` both ways (one request per connection: a later request on the same
  connection cannot name another host).

Either way the response is relayed as it comes, while the body still goes up: an upstream may
answer before it has read the whole body (a 413 to an upload, a refused `Expect: 100-continue`),
and then the rest of the body is not sent (`_exchange`).

To a host with a secret, TRACE and TRACK are refused (plain HTTP and HTTPS): a server that
answers them sends the request back, the secret's header included.

Every attempt becomes an `Attempt` handed to `on_event` when it ends. A `Budget` shared by the
run's connections counts bytes both ways and connections; past either, the connection is cut or
refused with the limit's name. A connection that moves no bytes either way for IDLE_TIMEOUT_S
(a body, a response, a tunnel) is cut with that name.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import h11

from . import tls
from .interception import SessionCA
from .policy import IPAddress, host_of, literal_ip, refused_address, split_port
from .rules import Policy, Secret
from .tlsstream import TlsServerStream

MAX_HEAD_BYTES = 16 * 1024  # a request or response head; a longer one is refused
HEAD_TIMEOUT_S = 30.0  # for the sandbox to send a whole request head or ClientHello
IDLE_TIMEOUT_S = 120.0  # a body, a response or a tunnel that moves no byte either way this long is cut
CONNECT_TIMEOUT_S = 30.0  # to resolve a name and connect upstream
MAX_OPEN = 64  # connections of one sandbox the proxy holds at once, refused ones included: each
# holds up to two host descriptors; one past it is closed unanswered (never read, never waited on)
LINGER_S = 30.0  # after an early response: how long the rest of the sandbox's body is read and dropped,
LINGER_IDLE_S = 5.0  # ... ending sooner when it sends nothing this long (nginx's lingering_time/_timeout)
LINGER_BYTES = 64 * 1024**2  # ... and how much of it at most
_CHUNK = 64 * 1024
_SHOWN_CHARS = 80
# Never forwarded: they describe one hop, or the proxy, not the request.
_HOP_HEADERS = {
    b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"proxy-authenticate",
    b"te", b"trailer", b"upgrade", b"host",
}  # fmt: skip  (transfer-encoding stays: h11 frames the body again from it)
_FRAMING = {b"content-length", b"transfer-encoding"}  # how h11 frames a body: never dropped by name
# Methods whose answer is the request as the server got it (RFC 9110 9.3.8; TRACK is IIS's), on by
# default in servers such as Apache httpd: to a host with a secret, they would hand it back.
_REFLECTING_METHODS = {b"TRACE", b"TRACK"}


@dataclass
class Attempt:
    """One connection the sandbox made to the proxy, as the record keeps it."""

    host: str
    port: int
    method: str
    allowed: bool = False
    reason: str = ""  # why it was refused or cut ("" when it ran to its end)
    address: str = ""  # what the proxy connected to
    bytes_up: int = 0  # sandbox -> upstream
    bytes_down: int = 0  # upstream -> sandbox
    duration_s: float = 0.0
    intercepted: bool = False  # HTTPS the proxy terminated to add a secret (the method is the inner one)
    replied: bool = field(default=False, repr=False)  # an answer went back: a refusal only closes

    def fields(self) -> dict[str, object]:
        kept = asdict(self)
        del kept["replied"]
        return kept


@dataclass
class Budget:
    """A run's egress limits, shared by its connections: bytes both ways, and connections."""

    max_bytes: int
    max_connections: int
    used_bytes: int = 0
    connections: int = 0
    open: int = 0  # connections held now, refused ones included, at most MAX_OPEN
    exhausted: str | None = field(default=None)
    dropped: int = 0  # connections closed unanswered because MAX_OPEN were held
    _told: set[str] = field(default_factory=set)  # limit refusals already recorded once

    def hold(self) -> bool:
        """Hold one more connection (`release` it when it ends), or False when MAX_OPEN are held:
        then it is closed at once, so a sandbox cannot make the host hold more descriptors."""
        if self.open >= MAX_OPEN:
            self.dropped += 1
            return False
        self.open += 1
        return True

    def admit(self) -> str | None:
        """Count one more connection, or say why it must be refused (a limit's name; then
        nothing is counted)."""
        if self.exhausted:
            return self.exhausted
        if self.connections >= self.max_connections:
            return f"the egress_connections limit of {self.max_connections} is reached"
        self.connections += 1
        return None

    def first_time(self, refusal: str) -> bool:
        """Whether a limit's refusal is told for the first time: the record keeps that one only,
        so a sandbox past its limits cannot grow the record by reconnecting."""
        if refusal in self._told:
            return False
        self._told.add(refusal)
        return True

    def release(self) -> None:
        self.open -= 1

    def take(self, n: int) -> bool:
        self.used_bytes += n
        if self.used_bytes > self.max_bytes:
            self.exhausted = f"the egress_bytes budget of {self.max_bytes} bytes is used up"
        return self.exhausted is None


class Refused(Exception):
    """A connection the policy does not allow; the message is the reason recorded and sent back."""


class Reader(Protocol):
    """What the HTTP code reads from: an asyncio stream, or TLS the proxy terminated."""

    async def read(self, n: int = -1) -> bytes: ...


class Writer(Protocol):
    """What the HTTP code writes to: an asyncio stream, or TLS the proxy terminated."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...

    def can_write_eof(self) -> bool: ...

    def write_eof(self) -> None: ...


def _shown(value: object) -> str:
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


class Proxy:
    """The proxy of one sandbox session, on `socket_path` until `close`."""

    def __init__(
        self,
        policy: Policy,
        socket_path: Path,
        budget: Budget,
        on_event: Callable[[Attempt], None],
        *,
        environ: Mapping[str, str] = os.environ,
        upstream_cafile: Path | None = None,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        """`upstream_cafile`: trust roots for upstream TLS in addition to the default store
        (host configuration only: tests' loopback upstreams; never the sandbox's to choose)."""
        self.policy, self.socket_path, self.budget = policy, socket_path, budget
        self._on_event, self._environ = on_event, environ
        self.idle_timeout_s = idle_timeout_s
        hosts = {secret.host for secret in policy.secrets}
        self.ca: SessionCA | None = SessionCA(hosts) if hosts else None  # its key: this object only
        self._upstream_tls = ssl.create_default_context()
        if upstream_cafile is not None:
            self._upstream_tls.load_verify_locations(cafile=str(upstream_cafile))
        self._upstream_tls.set_alpn_protocols(["http/1.1"])
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen on `socket_path` (a stale socket a killed process left there is replaced)."""
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        self._server = await asyncio.start_unix_server(self._accept, path=str(self.socket_path), limit=_CHUNK)
        os.chmod(self.socket_path, 0o666)  # the sandbox's uid may differ (root host); the folder guards it

    async def close(self) -> None:
        """Stop listening, cut every connection, remove the socket. Idempotent."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.ensure_future(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        started = time.monotonic()
        if not self.budget.hold():
            writer.close()
            if self.budget.dropped == 1:  # once: every later one would be the same line
                attempt = Attempt(host="", port=0, method="-", reason=f"{MAX_OPEN} connections are open already: later ones are closed unanswered")
                with contextlib.suppress(Exception):
                    self._on_event(attempt)
            return
        attempt = Attempt(host="", port=0, method="")
        refusal = self.budget.admit()
        told = refusal is None or self.budget.first_time(refusal)
        try:
            conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
            request = await asyncio.wait_for(_next_request(reader, conn), HEAD_TIMEOUT_S)
            if request is None:
                return
            attempt.method = _shown(request.method)
            if refusal:
                raise Refused(refusal)
            if request.method == b"CONNECT":
                await self._tunnel(request, conn, reader, writer, attempt)
            else:
                await self._forward(request, conn, reader, writer, attempt)
        except Refused as exc:
            attempt.reason = str(exc)
            if not attempt.replied:
                await _send_refusal(writer, attempt.reason)
        except asyncio.TimeoutError:
            attempt.reason = "the request did not arrive in time"
        except h11.ProtocolError as exc:
            attempt.method = attempt.method or "?"  # no request line came through: still an attempt
            attempt.reason, status = _refusal_of(exc)
            if not attempt.replied:
                await _send_refusal(writer, attempt.reason, status)
        except (ConnectionError, OSError) as exc:
            attempt.reason = attempt.reason or f"connection lost: {_shown(exc)}"
        finally:
            writer.close()
            self.budget.release()
            attempt.duration_s = round(time.monotonic() - started, 6)
            if attempt.method and told:  # a connection that sent nothing is no attempt
                with contextlib.suppress(Exception):
                    self._on_event(attempt)

    # ------------------------------------------------------------------ checks

    async def _check(self, host: str, port: int, attempt: Attempt) -> list[IPAddress]:
        """The addresses `host:port` may be reached at, or Refused with why."""
        attempt.host, attempt.port = host, port
        if self.policy.rule_for(host, port) is None:
            what = "raw IP address" if literal_ip(host) is not None else "host"
            raise Refused(f"{host}:{port}: this {what} and port are not in the allowlist")
        literal = literal_ip(host)
        if literal is not None:
            return [literal]  # listed literally: the user named this address
        mapped = self.policy.address_for(host)
        if mapped is not None:
            return [ipaddress.ip_address(mapped)]
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), CONNECT_TIMEOUT_S
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise Refused(f"{host}: the name does not resolve ({_shown(exc)})") from None
        found = [ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in infos]
        usable = [address for address in found if refused_address(address) is None]
        if not usable:
            why = refused_address(found[0]) if found else "no address"
            raise Refused(f"{host} resolves to {found[0] if found else '-'}, {why}; only `resolve` can name such an address")
        return usable

    async def _connect(
        self, addresses: list[IPAddress], port: int, attempt: Attempt, *, tls_host: str | None = None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the first of `addresses` that answers; with `tls_host`, TLS to it,
        verified (an upstream whose certificate fails is Refused, never tried elsewhere)."""
        last: Exception | None = None
        tls_options: dict[str, object] = {}
        if tls_host is not None:
            tls_options = {"ssl": self._upstream_tls, "server_hostname": tls_host.strip("[]"), "ssl_handshake_timeout": CONNECT_TIMEOUT_S}
        for address in addresses:
            try:
                pair = await asyncio.wait_for(
                    asyncio.open_connection(str(address), port, limit=_CHUNK, **tls_options), CONNECT_TIMEOUT_S  # type: ignore[arg-type]
                )
            except ssl.SSLCertVerificationError as exc:
                attempt.address = str(address)
                raise Refused(f"{attempt.host}:{port}: the upstream's certificate failed verification ({_shown(exc.verify_message)})") from None
            except (OSError, asyncio.TimeoutError) as exc:
                last = exc
                continue
            attempt.address = str(address)
            return pair
        raise Refused(f"cannot connect to {attempt.host}:{port}: {_shown(last)}")

    # ------------------------------------------------------------------ CONNECT

    async def _tunnel(
        self, request: h11.Request, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, attempt: Attempt
    ) -> None:
        host, port = _authority(request.target, default_port=None)
        addresses = await self._check(host, port, attempt)
        for _ in range(2):  # EndOfMessage, then PAUSED: h11 leaves the tunnel's bytes to us
            event = conn.next_event()
            if event is h11.PAUSED:
                break
            if not isinstance(event, h11.EndOfMessage):
                raise Refused("a CONNECT request has no body")
        else:
            raise Refused("a CONNECT request has no body")
        early, _ = conn.trailing_data
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        attempt.replied = True
        hello = await asyncio.wait_for(_client_hello(reader, early), HEAD_TIMEOUT_S)
        try:
            name = tls.server_name(hello)
        except tls.NotClientHello as exc:
            raise Refused(f"the tunnel to {host} does not start with a TLS ClientHello ({exc})") from None
        expected = None if literal_ip(host) is not None else host
        if (name and _same_name(name)) != expected:
            shown = "no server name" if name is None else f"the TLS server name {_shown(name)!r}"
            raise Refused(f"{shown} is not the CONNECT host {host}")
        secret = self.policy.secret_for(host)
        if secret is not None:
            await self._intercept(host, port, addresses, secret, TlsServerStream(reader, writer, self._server_tls(host), hello), attempt)
            return
        up_reader, up_writer = await self._connect(addresses, port, attempt)
        attempt.allowed = True
        try:
            if not self.budget.take(len(hello)):
                raise Refused(self.budget.exhausted or "")
            attempt.bytes_up += len(hello)
            up_writer.write(hello)
            await self._relay(reader, writer, up_reader, up_writer, attempt)
        finally:
            up_writer.close()

    def _server_tls(self, host: str) -> ssl.SSLContext:
        assert self.ca is not None  # made for every host with a secret
        return self.ca.server_context(host)

    async def _intercept(
        self, host: str, port: int, addresses: list[IPAddress], secret: Secret, stream: TlsServerStream, attempt: Attempt
    ) -> None:
        """Terminate the sandbox's TLS for `host`, take one HTTP/1.1 request from inside it
        (bounded like plain HTTP; Host must be `host`), add the secret and send it upstream over
        verified TLS. A refusal goes back inside the TLS connection once it is up."""
        attempt.intercepted = True
        try:
            await asyncio.wait_for(stream.handshake(), HEAD_TIMEOUT_S)
        except (ssl.SSLError, ConnectionError) as exc:
            raise Refused(f"the sandbox's TLS handshake for {host} failed ({_shown(getattr(exc, 'reason', None) or exc)})") from None
        attempt.replied = False  # a refusal can be sent again, now inside TLS
        try:
            conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
            request = await asyncio.wait_for(_next_request(stream, conn), HEAD_TIMEOUT_S)
            if request is None:
                attempt.replied = True
                return
            attempt.method = _shown(request.method)
            if not request.target.startswith(b"/"):
                raise Refused(f"{_shown(request.target)}: inside HTTPS only origin-form requests (/path)")
            if request.method.upper() == b"CONNECT":  # a tunnel inside the tunnel the proxy would not relay
                raise Refused(f"{host}: CONNECT inside an intercepted HTTPS connection")
            named = [value for name, value in request.headers if name == b"host"]
            if len(named) != 1 or _authority(named[0], default_port=443) != (host, port):
                raise Refused(f"the Host header ({_shown(named[0]) if named else 'none'}) does not name the TLS host {host}:{port}")
            headers = self._upstream_headers(request, host, port, secret, default_port=443)
            up_reader, up_writer = await self._connect(addresses, port, attempt, tls_host=host)
            attempt.allowed = True
            try:
                path = request.target.decode("ascii", "replace")
                await self._exchange(request.method, path, headers, conn, stream, stream, up_reader, up_writer, attempt)
            finally:
                up_writer.close()
        except (Refused, h11.ProtocolError) as exc:
            if not attempt.replied:
                await _send_refusal(stream, *_refusal_of(exc))
            raise
        finally:
            attempt.replied = True  # `_serve` must write nothing in plain text into this TLS connection

    def _upstream_headers(
        self, request: h11.Request, host: str, port: int, secret: Secret | None, *, default_port: int
    ) -> list[tuple[bytes, bytes]]:
        """The request's headers as they go upstream: hop-by-hop and proxy headers dropped, the
        secret's header (if any) set from the host's environment in place of the sandbox's,
        Host named by the proxy, `Connection: close`."""
        headers = _end_to_end(request.headers)
        if any(name == b"transfer-encoding" for name, _ in headers):  # h11 framed the body by it:
            headers = [(n, v) for n, v in headers if n != b"content-length"]  # RFC 9112 6.3, no smuggling
        if secret is not None:
            if request.method.upper() in _REFLECTING_METHODS:
                raise Refused(f"{host}: {_shown(request.method)} asks the server to reflect the request, which would hand back its secret")
            value = secret.value(self._environ)
            if value is None:
                raise Refused(f"{host}: its secret's environment variable {secret.env} is not set on the host")
            if not value.isprintable() or not value.isascii():
                raise Refused(f"{host}: its secret's environment variable {secret.env} holds characters a header cannot")
            headers = [(n, v) for n, v in headers if n != secret.header.lower().encode()]
            headers.append((secret.header.encode(), value.encode()))
        return [(b"Host", (host if port == default_port else f"{host}:{port}").encode()), *headers, (b"Connection", b"close")]

    def _idle_reason(self) -> str:
        return f"no byte moved either way for IDLE_TIMEOUT_S = {self.idle_timeout_s:g} s: the connection was cut"

    def _charge(self, attempt: Attempt, data: bytes, up: bool) -> bytes:
        """`data`, taken from the byte budget (Refused past it) and counted on `attempt`'s side."""
        if not self.budget.take(len(data)):
            raise Refused(self.budget.exhausted or "")
        if up:
            attempt.bytes_up += len(data)
        else:
            attempt.bytes_down += len(data)
        return data

    async def _relay(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, attempt: Attempt,
    ) -> None:  # fmt: skip
        last = [time.monotonic()]  # a byte either way keeps both directions alive

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, up: bool) -> None:
            while True:
                try:
                    data = await asyncio.wait_for(source.read(_CHUNK), self.idle_timeout_s)
                except asyncio.TimeoutError:
                    if time.monotonic() - last[0] < self.idle_timeout_s:
                        continue
                    raise Refused(self._idle_reason()) from None
                if not data:
                    break
                last[0] = time.monotonic()
                sink.write(self._charge(attempt, data, up))
                await _drain(sink, self.idle_timeout_s, self._idle_reason())
            with contextlib.suppress(OSError):
                if sink.can_write_eof():
                    sink.write_eof()

        tasks = [asyncio.ensure_future(pipe(reader, up_writer, True)), asyncio.ensure_future(pipe(up_reader, writer, False))]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                error = task.exception()
                if error is not None:
                    raise error
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ plain HTTP

    async def _forward(
        self, request: h11.Request, conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, attempt: Attempt
    ) -> None:
        target = request.target.decode("ascii", "replace")
        parts = urlsplit(target)
        if parts.scheme.lower() != "http" or not parts.netloc:
            raise Refused(f"{_shown(target)}: only absolute http:// requests, or CONNECT for HTTPS")
        if "@" in parts.netloc:
            raise Refused(f"{_shown(target)}: credentials in the URL are refused")
        host, port = _authority(parts.netloc.encode(), default_port=80)
        attempt.host, attempt.port = host, port
        named = [value for name, value in request.headers if name == b"host"]
        if len(named) != 1 or _authority(named[0], default_port=80) != (host, port):
            shown = _shown(named[0]) if named else "none"
            raise Refused(f"the Host header ({shown}) does not name the request's host {host}:{port}")
        addresses = await self._check(host, port, attempt)
        secret = self.policy.secret_for(host)
        if secret is not None and not secret.plain_http:
            raise Refused(f"{host}: its secret goes only inside HTTPS (https://), never in clear text; plain_http = true in its secret allows it")
        headers = self._upstream_headers(request, host, port, secret, default_port=80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        up_reader, up_writer = await self._connect(addresses, port, attempt)
        attempt.allowed = True
        try:
            await self._exchange(request.method, path, headers, conn, reader, writer, up_reader, up_writer, attempt)
        finally:
            up_writer.close()

    async def _exchange(
        self, method: bytes, path: str, headers: list[tuple[bytes, bytes]], conn: h11.Connection,
        reader: Reader, writer: Writer,
        up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, attempt: Attempt,
    ) -> None:  # fmt: skip
        """Send the request upstream and its response back, through h11 both ways, at once.

        Why at once: an upstream may answer before it has read the whole body (a 413 or 401 to a
        chunked POST, a refusal of `Expect: 100-continue`) and then read no more; relaying the
        body first left the proxy blocked on it and the sandbox with `connection lost` (E-N2).
        So the response is relayed as it comes (a `100 Continue` the sandbox waits for too), and
        once it has ended the rest of the body is not sent (RFC 9112 9.6: the connection to the
        upstream is closed) and the sandbox's side is closed lingering (`_linger`)."""
        upstream = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        up_writer.write(self._charge(attempt, upstream.send(h11.Request(method=method, target=path, headers=headers)) or b"", True))
        moved = [time.monotonic()]  # a byte either way keeps both directions alive, as in `_relay`
        sending = asyncio.ensure_future(self._send_body(conn, reader, upstream, up_writer, attempt, moved))
        answering = asyncio.ensure_future(self._relay_response(conn, writer, upstream, up_reader, attempt, moved))
        try:
            await asyncio.wait((sending, answering), return_when=asyncio.FIRST_COMPLETED)
            if not answering.done():
                sending.result()  # the sandbox's body failed (refused, cut, idle): that is the outcome
                await answering
            answering.result()
        finally:
            up_writer.close()  # what stops `_send_body`: a cancel can be lost (3.11's wait_for, E-R9)
            for task in (sending, answering):
                task.cancel()
            await asyncio.gather(sending, answering, return_exceptions=True)
        if conn.their_state is h11.SEND_BODY:  # answered early: the sandbox may still be sending
            await _linger(reader, writer, self.budget.take)

    async def _send_body(
        self, conn: h11.Connection, reader: Reader, upstream: h11.Connection, up_writer: asyncio.StreamWriter,
        attempt: Attempt, moved: list[float],
    ) -> None:  # fmt: skip
        """The sandbox's request body, upstream. An upstream that stops taking it (it closed:
        it may have answered already) ends the sending, not the exchange: its response, or its
        lack of one, is `_relay_response`'s to tell."""
        idle, why = self.idle_timeout_s, self._idle_reason()
        while not up_writer.is_closing():  # closed by `_exchange` once the answer ended
            event = await _next(reader, conn, idle=(idle, why), moved=moved)
            if up_writer.is_closing():
                return
            if isinstance(event, (h11.Data, h11.EndOfMessage)):
                data = self._charge(attempt, upstream.send(event) or b"", True)
                try:
                    up_writer.write(data)
                    await _drain(up_writer, idle, why)
                except (ConnectionError, OSError):
                    return
                if isinstance(event, h11.EndOfMessage):
                    return
            else:
                raise Refused("the request body ended early")

    async def _relay_response(
        self, conn: h11.Connection, writer: Writer, upstream: h11.Connection, up_reader: asyncio.StreamReader,
        attempt: Attempt, moved: list[float],
    ) -> None:  # fmt: skip
        """The upstream's response, back to the sandbox, whenever it comes; a `100 Continue`
        only while the sandbox waits for one (`Expect: 100-continue`), other 1xx dropped."""
        idle, why = self.idle_timeout_s, self._idle_reason()
        while True:
            event = await _next(up_reader, upstream, count=lambda data: self._charge(attempt, data, False), idle=(idle, why), moved=moved)
            if isinstance(event, h11.Response):
                kept = _end_to_end(event.headers)
                response = h11.Response(status_code=event.status_code, headers=[*kept, (b"Connection", b"close")], reason=event.reason)
                writer.write(conn.send(response) or b"")
                attempt.replied = True
            elif isinstance(event, h11.Data):
                writer.write(conn.send(event) or b"")
                await _drain(writer, idle, why)
            elif isinstance(event, h11.EndOfMessage):
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await _drain(writer, idle, why)
                return
            elif isinstance(event, h11.InformationalResponse):
                if event.status_code == 100 and conn.they_are_waiting_for_100_continue:
                    writer.write(conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
                    await _drain(writer, idle, why)
            else:
                raise Refused("the upstream closed before its response ended")


async def _next(
    reader: Reader, conn: h11.Connection, count: Callable[[bytes], bytes] | None = None,
    idle: tuple[float, str] | None = None, moved: list[float] | None = None,
) -> object:  # fmt: skip
    """The next h11 event of `conn`, reading from `reader` as needed. A head is bounded twice:
    h11 refuses an incomplete one past MAX_HEAD_BYTES, and `_head_bytes` a whole one that
    arrived in one read. With `idle` (seconds, reason), a read that waits longer is Refused,
    unless `moved` (the time a byte last moved, shared by both directions of an exchange) says
    the other direction moved within that time; a read that gets bytes sets `moved`."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            if isinstance(event, (h11.Request, h11.Response, h11.InformationalResponse)) and _head_bytes(event) > MAX_HEAD_BYTES:
                raise h11.RemoteProtocolError(f"a head longer than MAX_HEAD_BYTES = {MAX_HEAD_BYTES}")
            return event
        if idle is None:
            data = await reader.read(_CHUNK)
        else:
            try:
                data = await asyncio.wait_for(reader.read(_CHUNK), idle[0])
            except asyncio.TimeoutError:
                if moved is not None and time.monotonic() - moved[0] < idle[0]:
                    continue
                raise Refused(idle[1]) from None
            if moved is not None:
                moved[0] = time.monotonic()
        conn.receive_data(count(data) if count and data else data)


def _end_to_end(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` without the hop-by-hop ones: the fixed set and those a `Connection` header names
    (RFC 9110 7.6.1; a proxy forwarding them lets one side smuggle per-hop state to the other).
    The body's framing is h11's to keep, whatever `Connection` names."""
    named = {token.strip().lower() for name, value in headers if name == b"connection" for token in value.split(b",")}
    dropped = (_HOP_HEADERS | named) - _FRAMING
    return [(name, value) for name, value in headers if name not in dropped]


def _head_bytes(event: h11.Request | h11.Response | h11.InformationalResponse) -> int:
    """The size of `event`'s head as sent: its first line and each `name: value` line."""
    first = len(event.method) + len(event.target) if isinstance(event, h11.Request) else len(event.reason) + 4
    return first + 12 + sum(len(name) + len(value) + 4 for name, value in event.headers)


async def _linger(reader: Reader, writer: Writer, take: Callable[[int], bool]) -> None:
    """Close the sandbox's side after a response that came before its whole request body, as
    RFC 9112 9.6 says a server should: half-close (plain streams; TLS has no half close), then
    read what it still sends and drop it, until it ends or pauses for LINGER_IDLE_S, for at most
    LINGER_S and LINGER_BYTES.
    Closing with its bytes unread would reset the connection, and a reset can discard the
    response before the sandbox's client has read it. Nothing read here goes anywhere, but it is
    `take`n from the run's byte budget (the host moved it; E-R1): past the budget, it stops."""
    with contextlib.suppress(OSError, NotImplementedError):
        if writer.can_write_eof():
            writer.write_eof()
    deadline, dropped = time.monotonic() + LINGER_S, 0
    with contextlib.suppress(asyncio.TimeoutError, ConnectionError, OSError, ssl.SSLError):
        while dropped < LINGER_BYTES and (left := deadline - time.monotonic()) > 0:
            data = await asyncio.wait_for(reader.read(_CHUNK), min(left, LINGER_IDLE_S))
            if not data or not take(len(data)):
                return
            dropped += len(data)


async def _drain(writer: Writer, idle: float, reason: str) -> None:
    """`writer.drain()`, Refused with `reason` when the other side reads nothing for `idle` s."""
    try:
        await asyncio.wait_for(writer.drain(), idle)
    except asyncio.TimeoutError:
        raise Refused(reason) from None


async def _next_request(reader: Reader, conn: h11.Connection) -> h11.Request | None:
    event = await _next(reader, conn)
    if isinstance(event, h11.ConnectionClosed):
        return None
    if not isinstance(event, h11.Request):
        raise h11.RemoteProtocolError("expected a request")
    return event


async def _client_hello(reader: asyncio.StreamReader, early: bytes) -> bytes:
    """The TLS records of a whole ClientHello: `early` (read with the CONNECT) and what follows."""
    data = early
    while True:
        try:
            _, whole = tls.handshake_bytes(data)
        except tls.NotClientHello:
            return data  # `server_name` says why
        if whole or len(data) > tls.MAX_HELLO_BYTES:
            return data
        chunk = await reader.read(_CHUNK)
        if not chunk:
            return data
        data += chunk


def _authority(value: bytes, *, default_port: int | None) -> tuple[str, int]:
    """(host, port) of a CONNECT target or a Host header; Refused when it is not one."""
    try:
        text = value.decode("ascii")
        host, port = split_port(text)
        name = host_of(host)
    except (UnicodeDecodeError, ValueError):
        raise Refused(f"{_shown(value)} is not HOST:PORT") from None
    if port is None:
        if default_port is None:
            raise Refused(f"{_shown(value)}: CONNECT needs HOST:PORT")
        port = default_port
    return name, port


def _same_name(name: str) -> str | None:
    try:
        return host_of(name)
    except ValueError:
        return None


def _refusal_of(exc: Refused | h11.ProtocolError) -> tuple[str, int]:
    """What the sandbox is told of a refusal or an HTTP error: its words and status."""
    if isinstance(exc, Refused):
        return str(exc), 403
    if isinstance(exc, h11.LocalProtocolError):  # what the proxy itself would send: its words may hold a secret
        return "the proxy could not forward this request", 400
    return f"not valid HTTP: {_shown(exc)}", 400


async def _send_refusal(writer: Writer, reason: str, status: int = 403) -> None:
    body = f"coderoom egress: refused: {reason}\n".encode("utf-8", "replace")
    head = f"HTTP/1.1 {status} {'Forbidden' if status == 403 else 'Bad Request'}\r\nContent-Type: text/plain; charset=utf-8\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError, ConnectionError):
        writer.write(head.encode() + body)
        await asyncio.wait_for(writer.drain(), 5)
