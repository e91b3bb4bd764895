"""Egress early-answer pass (2026-12-07): the proxy relays an upstream's response that comes
before the request body ended, then stops the body and closes the sandbox's side lingering
(`proxy._exchange`, `proxy._linger`). Attacked as a sandbox and a hostile upstream would, on the
proxy's Unix socket; upstreams on 127.0.0.1 only, reached through `resolve` names. See
docs/security.md, "Egress early answers and stream fallback attack pass" (E-R rows)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from egress.proxyclient import SECRET, running
from egress.upstreams import EARLY_ANSWER, Seen, TestCA, early_answerer, http_upstream, tcp_recorder, tcp_server

from coderoom.egress import proxy as proxy_module

CANARY = "canary-early-8c1f5e07a2"


def _table(*ports: int, names: tuple[str, ...] = ("api.test", "other.test")) -> dict[str, object]:
    return {
        "allow": [f"{name}:{port}" for name, port in zip(names, ports)],
        "resolve": {name: "127.0.0.1" for name in names},
    }


def _upload_head(port: int, length: int = 100 * 1024**2, extra: str = "") -> bytes:
    return (f"POST http://api.test:{port}/upload HTTP/1.1\r\nHost: api.test:{port}\r\n"
            f"Content-Length: {length}\r\n{extra}\r\n").encode()  # fmt: skip


async def _answered(socket_path: Path, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A connection that sent `head` and read the early answer to its end (the proxy now lingers)."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    writer.write(head)
    answer = await asyncio.wait_for(reader.readuntil(EARLY_ANSWER), 10)
    return reader, writer, answer


async def _ended(events: list[object], count: int = 1, within: float = 60.0) -> float:
    """Seconds until the proxy has reported `count` attempts (it does when a connection ends)."""
    started = time.monotonic()
    while len(events) < count:
        assert time.monotonic() - started < within, "the proxy never ended the connection"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_bytes_sent_into_the_linger_count_in_the_runs_egress_bytes(tmp_path: Path) -> None:
    """E-R1: what a sandbox sends after an early answer is read and dropped by the host, and counts
    in its egress_bytes like every byte it makes the proxy move: past the budget the linger ends
    and later connections are refused (10,000 lingering connections of 64 MiB each would
    otherwise move 640 GB through the host beside a 1 GiB budget)."""
    budget = 1024**2
    with early_answerer() as seen:
        proxy = await running(tmp_path, _table(seen.port), max_bytes=budget, reset_ok=True)
        reader, writer, answer = await _answered(proxy.proxy.socket_path, _upload_head(seen.port))
        assert answer.startswith(b"HTTP/1.1 413")
        pushed = 0
        with contextlib.suppress(ConnectionError, OSError):
            for _ in range(8 * 16):  # 8 MiB, eight times the budget
                writer.write(b"d" * 65536)
                await asyncio.wait_for(writer.drain(), 10)
                pushed += 65536
        writer.close()
        await _ended(proxy.events)
        later = await proxy.send(_upload_head(seen.port, 0))
        await proxy.proxy.close()
    assert proxy.proxy.budget.exhausted is not None, proxy.proxy.budget
    assert proxy.proxy.budget.used_bytes <= budget + 2 * 65536  # read no further than the budget
    assert b"egress_bytes" in later and later.startswith(b"HTTP/1.1 403")
    (event, refused) = proxy.events
    assert event.bytes_up <= 1024 + 65536  # the dropped bytes went nowhere (one chunk may have
    assert len(seen.raw) == 1  # been on its way when the answer ended); the refused one went nowhere either


@contextlib.contextmanager
def _answer_then_watch_close() -> Iterator[tuple[Seen, list[float]]]:
    """An upstream that answers 413 from the head alone and then notes how many seconds after its
    answer the proxy closed the connection (reading, and dropping, whatever came before)."""
    seen, closed_after = Seen(), []

    def answer(conn: socket.socket) -> None:
        def watch() -> None:
            with conn, contextlib.suppress(OSError):
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(1)
                seen.raw.append(head)
                conn.sendall(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: %d\r\n\r\n%s" % (len(EARLY_ANSWER), EARLY_ANSWER))
                answered = time.monotonic()
                conn.settimeout(30)
                while conn.recv(65536):
                    pass
                closed_after.append(time.monotonic() - answered)

        threading.Thread(target=watch, daemon=True).start()

    with tcp_server(answer) as seen.port:
        yield seen, closed_after


async def test_the_upstream_connection_is_closed_once_the_early_answer_ended(tmp_path: Path) -> None:
    """E-R2: while the sandbox's side lingers (up to LINGER_S), the upstream's connection is not
    held: it is closed when the answer has ended (RFC 9112 9.6), not when the linger does."""
    with _answer_then_watch_close() as (seen, closed_after):
        proxy = await running(tmp_path, _table(seen.port))
        reader, writer, _ = await _answered(proxy.proxy.socket_path, _upload_head(seen.port))
        for _ in range(4):  # a byte a second: the linger goes on (its silence limit is 5 s)
            await asyncio.sleep(1)
            writer.write(b"x")
        writer.close()
        await _ended(proxy.events)
        await proxy.proxy.close()
    assert closed_after and closed_after[0] < 2, closed_after
    assert proxy.events[0].reason == ""


async def test_a_sandbox_trickling_under_the_silence_limit_is_closed_at_linger_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """E-R3: a byte every LINGER_IDLE_S / 4 keeps the linger from going silent, and still ends it
    at LINGER_S (shortened here to keep the test short: the same rule at 30 s)."""
    monkeypatch.setattr(proxy_module, "LINGER_S", 2.0)
    monkeypatch.setattr(proxy_module, "LINGER_IDLE_S", 1.0)
    with early_answerer() as seen:
        proxy = await running(tmp_path, _table(seen.port), reset_ok=True)
        reader, writer, _ = await _answered(proxy.proxy.socket_path, _upload_head(seen.port))
        started = time.monotonic()

        async def trickle() -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while time.monotonic() - started < 20:
                    writer.write(b"x")
                    await writer.drain()
                    await asyncio.sleep(0.25)

        trickling = asyncio.ensure_future(trickle())
        took = await _ended(proxy.events, within=20)
        trickling.cancel()
        writer.close()
        await proxy.proxy.close()
    assert took < 2.0 + 1.5, took
    assert proxy.proxy.budget.open == 0


async def test_lingering_connections_count_in_the_open_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """E-R4: a lingering connection is one of the MAX_OPEN a sandbox may hold (shortened to 3):
    one more is closed unanswered; once they end, the next is served."""
    monkeypatch.setattr(proxy_module, "MAX_OPEN", 3)
    with early_answerer() as seen:
        proxy = await running(tmp_path, _table(seen.port), reset_ok=True)
        lingering = [await _answered(proxy.proxy.socket_path, _upload_head(seen.port)) for _ in range(3)]
        assert proxy.proxy.budget.open == 3
        reader, writer = await asyncio.open_unix_connection(str(proxy.proxy.socket_path))
        writer.write(_upload_head(seen.port))
        try:  # closed unanswered, at once (its head unread: a reset, or an end)
            assert await asyncio.wait_for(reader.read(), 5) == b""
        except ConnectionResetError:
            pass
        writer.close()
        for _, held, _ in lingering:
            held.close()  # the linger reads their end and stops
        await _ended(proxy.events, 4)
        again = await proxy.send(_upload_head(seen.port, 0))
        await proxy.proxy.close()
    assert again.startswith(b"HTTP/1.1 413"), again
    assert proxy.proxy.budget.dropped == 1


async def test_a_request_pipelined_after_an_early_answered_body_reaches_no_one(tmp_path: Path) -> None:
    """E-R5: the proxy takes one request a connection; bytes after an early-answered body (a second
    request, to another allowed host) are dropped by the linger, never parsed, never sent."""
    with early_answerer() as seen, tcp_recorder() as other:
        proxy = await running(tmp_path, _table(seen.port, other.port))
        second = f"GET http://other.test:{other.port}/ HTTP/1.1\r\nHost: other.test:{other.port}\r\n\r\n".encode()
        answer = await proxy.send(_upload_head(seen.port, 16) + b"0123456789abcdef" + second)
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 413") and answer.count(b"HTTP/1.1") == 1, answer
    assert other.raw == [] and len(seen.raw) == 1
    assert [(e.host, e.method) for e in proxy.events] == [("api.test", "POST")]


async def test_a_request_pipelined_after_a_whole_exchange_reaches_no_one(tmp_path: Path) -> None:
    """E-R5: the same after a body the upstream read and answered (the normal path)."""
    with http_upstream() as seen, tcp_recorder() as other:
        proxy = await running(tmp_path, _table(seen.port, other.port))
        second = f"GET http://other.test:{other.port}/ HTTP/1.1\r\nHost: other.test:{other.port}\r\n\r\n".encode()
        answer = await proxy.send(_upload_head(seen.port, 4) + b"echo" + second)
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"echo") and answer.count(b"HTTP/1.1") == 1, answer
    assert other.raw == [] and [path for path, _ in seen.requests] == ["/upload"]
    assert [(e.host, e.method) for e in proxy.events] == [("api.test", "POST")]


@contextlib.contextmanager
def _informational(lines: bytes, final: bytes = b"HTTP/1.1 413 Content Too Large\r\nContent-Length: 3\r\n\r\nno\n") -> Iterator[Seen]:
    """An upstream that answers each request head with `lines` (1xx responses), then `final`."""
    seen = Seen()

    def answer(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            head = b""
            while b"\r\n\r\n" not in head:
                head += conn.recv(1)
            seen.raw.append(head)
            conn.sendall(lines + final)
            conn.settimeout(2)
            while conn.recv(65536):
                pass

    with tcp_server(answer) as seen.port:
        yield seen


async def test_an_upstream_s_1xx_flood_reaches_the_sandbox_as_one_100_continue_and_counts(tmp_path: Path) -> None:
    """E-R6: three `100 Continue` and 2,000 `102 Processing`: the sandbox, which waits for one,
    gets one, then the answer; every byte of the flood counts in the budget."""
    flood = b"HTTP/1.1 100 Continue\r\n\r\n" * 3 + b"HTTP/1.1 102 Processing\r\nX-Pad: ppppppppppp\r\n\r\n" * 2000
    with _informational(flood) as seen:
        proxy = await running(tmp_path, _table(seen.port))
        answer = await proxy.send(_upload_head(seen.port, 10, "Expect: 100-continue\r\n"))
        await proxy.proxy.close()
    assert answer.count(b"HTTP/1.1 100") == 1 and b"102" not in answer, answer[:400]
    assert answer.startswith(b"HTTP/1.1 100 ") and b"HTTP/1.1 413" in answer and answer.endswith(b"no\n")
    (event,) = proxy.events
    assert event.bytes_down >= len(flood) and event.reason == ""


async def test_a_1xx_flood_past_the_byte_budget_is_cut_with_its_name(tmp_path: Path) -> None:
    """E-R6: an endless run of 1xx lines is bytes like any other: past egress_bytes, cut."""
    flood = b"HTTP/1.1 102 Processing\r\n\r\n" * 20_000
    with _informational(flood) as seen:
        proxy = await running(tmp_path, _table(seen.port), max_bytes=100_000, reset_ok=True)
        answer = await proxy.send(_upload_head(seen.port, 0))
        await proxy.proxy.close()
    assert b"102" not in answer and b"413" not in answer
    (event,) = proxy.events
    assert "egress_bytes" in event.reason


async def test_an_unasked_101_opens_no_tunnel(tmp_path: Path) -> None:
    """E-R7: `Upgrade` is dropped on the way up, so a 101 answers nothing the sandbox asked: the
    upstream's bytes after it never reach the sandbox raw."""
    switch = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: raw\r\nConnection: upgrade\r\n\r\n"
    with _informational(switch, final=b"RAW-" + CANARY.encode()) as seen:
        proxy = await running(tmp_path, _table(seen.port), reset_ok=True)
        head = _upload_head(seen.port, 0, "Upgrade: raw\r\nConnection: upgrade\r\n")
        answer = await proxy.send(head)
        await proxy.proxy.close()
    assert CANARY.encode() not in answer and b"101" not in answer.split(b"\r\n")[0], answer
    assert b"upgrade" not in seen.raw[0].lower()
    (event,) = proxy.events
    assert event.reason != ""


@contextlib.contextmanager
def _desynced(tls: ssl.SSLContext) -> Iterator[Seen]:
    """The worst upstream for an early answer: it answers the first request from its head alone
    (413, keeping the connection open whatever `Connection` says), then takes the following
    bytes as more requests and answers each with everything it was sent, the first head (and the
    secret in it) included. `seen.raw`: each request head it parsed."""
    seen = Seen()

    def answer(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn = tls.wrap_socket(conn, server_side=True)
            got = b""
            conn.settimeout(3)
            while b"\r\n\r\n" not in got:
                got += conn.recv(1)
            seen.raw.append(got)
            conn.sendall(b"HTTP/1.1 413 Content Too Large\r\nContent-Length: %d\r\n\r\n%s" % (len(EARLY_ANSWER), EARLY_ANSWER))
            rest = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in rest and (chunk := conn.recv(65536)):
                    rest += chunk
            if b"\r\n\r\n" in rest:
                seen.raw.append(rest)
                echo = got + rest
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(echo), echo))
            with contextlib.suppress(OSError):
                while conn.recv(65536):
                    pass
            conn.close()

    with tcp_server(answer) as seen.port:
        yield seen


async def test_inside_https_a_request_smuggled_in_an_early_answered_body_never_brings_the_secret_back(tmp_path: Path) -> None:
    """E-R8: the sandbox's body is a whole second request; an upstream that reads it as one (a
    desync) answers it with the secret-bearing first head. The proxy reads one response a
    connection, the early one, and sends nothing after it: the second answer is never relayed."""
    test_ca = TestCA(tmp_path)
    with _desynced(test_ca.server_context("api.test")) as seen:
        target = f"api.test:{seen.port}"
        table = {"allow": [target], "resolve": {"api.test": "127.0.0.1"}, "secrets": [SECRET]}
        proxy = await running(tmp_path, table, environ={"TOKEN": CANARY}, upstream_cafile=test_ca.cafile)
        assert proxy.proxy.ca is not None
        smuggled = f"GET /echo HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
        request = f"POST /upload HTTP/1.1\r\nHost: {target}\r\nContent-Length: {len(smuggled)}\r\n\r\n".encode() + smuggled
        answer = await asyncio.to_thread(_https_linger, proxy.proxy.socket_path, "api.test", seen.port, request, proxy.proxy.ca.pem())
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 413") and answer.endswith(EARLY_ANSWER), answer
    assert CANARY.encode() not in answer
    assert len(seen.raw) == 2 and CANARY.encode() in seen.raw[0]  # the desync happened upstream
    (event,) = proxy.events
    assert (event.method, event.intercepted, event.reason) == ("POST", True, "")


def _https_linger(socket_path: Path, host: str, port: int, request: bytes, pem: bytes) -> bytes:
    """`request` inside HTTPS through the proxy; everything the proxy sent back before it closed
    (or went silent for 10 s: then the test fails on what came)."""
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(10)
        raw.connect(str(socket_path))
        raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        assert raw.recv(4096).startswith(b"HTTP/1.1 200")
        context = ssl.create_default_context(cadata=pem.decode())
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(request)
            answer = b""
            with contextlib.suppress(OSError, TimeoutError):
                while chunk := tls.recv(65536):
                    answer += chunk
    return answer


def _https_push_after_answer(socket_path: Path, host: str, port: int, pem: bytes, push: int) -> tuple[bytes, int]:
    """Inside HTTPS through the proxy: an upload's head, its early answer read, then `push` bytes
    of body; (the answer, how many bytes went before the proxy closed)."""
    with socket.socket(socket.AF_UNIX) as raw:
        raw.settimeout(10)
        raw.connect(str(socket_path))
        raw.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        assert raw.recv(4096).startswith(b"HTTP/1.1 200")
        context = ssl.create_default_context(cadata=pem.decode())
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(f"PUT /upload HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: 100000000\r\n\r\n".encode())
            answer = b""
            while not answer.endswith(EARLY_ANSWER) and (chunk := tls.recv(65536)):
                answer += chunk
            pushed = 0
            with contextlib.suppress(OSError, TimeoutError):
                while pushed < push:
                    tls.sendall(b"d" * 65536)
                    pushed += 65536
    return answer, pushed


async def test_inside_https_bytes_sent_into_the_linger_count_in_egress_bytes(tmp_path: Path) -> None:
    """E-R1 inside intercepted HTTPS (no half close: the linger reads TLS): 32 MiB pushed after the
    answer with a 1 MiB budget are cut there, and the next connection is refused with its name."""
    test_ca = TestCA(tmp_path)
    with early_answerer(tls=test_ca.server_context("api.test")) as seen:
        target = f"api.test:{seen.port}"
        table = {"allow": [target], "resolve": {"api.test": "127.0.0.1"}, "secrets": [SECRET]}
        proxy = await running(tmp_path, table, max_bytes=1024**2, environ={"TOKEN": CANARY}, upstream_cafile=test_ca.cafile, reset_ok=True)
        assert proxy.proxy.ca is not None
        push = 32 * 1024**2
        answer, pushed = await asyncio.to_thread(_https_push_after_answer, proxy.proxy.socket_path, "api.test", seen.port, proxy.proxy.ca.pem(), push)
        await _ended(proxy.events)
        later = await proxy.send(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 413") and CANARY.encode() not in answer
    assert pushed < push and proxy.proxy.budget.exhausted is not None
    assert b"egress_bytes" in later
    assert proxy.events[0].bytes_up <= 1024 + 65536 and proxy.events[0].intercepted
