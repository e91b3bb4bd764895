"""The connection rules of `coderoom.serving` on a real uvicorn on 127.0.0.1, in process: a
request head has a deadline, connections over the cap are closed at once, and a request still
in flight when the server stops is answered 503, never cancelled into a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from coderoom.serving import connections, server
from coderoom.serving.connections import FD_RESERVE, MAX_CONNECTIONS, connection_cap


async def _echo_body(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(len(await request.body())))


APP = Starlette(routes=[Route("/", _echo_body, methods=["GET", "POST"])])


@contextlib.asynccontextmanager
async def _serving(app: Starlette = APP) -> AsyncIterator[tuple[int, asyncio.Task[None]]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    listening = asyncio.Event()
    task = asyncio.create_task(server.serve_app(app, sock, listening.set))
    await listening.wait()
    try:
        yield port, task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _reply(port: int, request: bytes, timeout: float) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    try:
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


def _run(test: Callable[[], object]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


def test_a_connection_that_never_finishes_its_head_is_closed_after_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections, "HEAD_TIMEOUT_S", 0.5)

    async def test() -> None:
        async with _serving() as (port, _):
            assert await _reply(port, b"GET / HTTP/1.1\r\nHo", timeout=5) == b""

    _run(test)


def test_a_request_whose_head_is_complete_is_not_cut_by_the_head_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections, "HEAD_TIMEOUT_S", 0.3)

    async def test() -> None:
        async with _serving() as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n1")
            await asyncio.sleep(0.8)  # the body is slow; the head was on time
            writer.write(b"2")
            reply = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"\r\n\r\n2")

    _run(test)


def test_connections_over_the_cap_are_closed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "connection_cap", lambda _limit: 2)

    async def test() -> None:
        async with _serving() as (port, _):
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            assert await _reply(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5) == b""
            for _, writer in held:
                writer.close()
            await asyncio.sleep(0.2)
            assert (await _reply(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5)).startswith(b"HTTP/1.1 200")

    _run(test)


def test_the_cap_leaves_descriptors_under_the_open_files_limit() -> None:
    assert connection_cap(256) == 256 - FD_RESERVE
    assert connection_cap(1 << 20) == MAX_CONNECTIONS
    assert connection_cap(10) == 1


def test_a_body_still_arriving_at_the_stop_is_answered_503_after_the_grace(monkeypatch: pytest.MonkeyPatch,
                                                                          capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(server, "SHUTDOWN_GRACE_S", 0.5)

    async def test() -> None:
        async with _serving() as (port, task):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n1")
            await asyncio.sleep(0.2)
            task.cancel()
            reply = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert reply.startswith(b"HTTP/1.1 503") and b"connection: close" in reply.lower()

    _run(test)
    assert "Traceback" not in capfd.readouterr().err
