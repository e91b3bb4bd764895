"""`presence.Presence`'s rules on their own (a SessionManager on the fake backend, each call's
`ClientRequest` handed in as the HTTP middleware would): a dropped call is cancelled and releases
the sessions it named or opened and those its MCP session used last; a request from that MCP
session, or a call naming the session, keeps them; a call that was not dropped changes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from coderoom import SessionManager
from coderoom.mcp_server.presence import SCOPE_KEY, ClientGone, ClientRequest, Presence

GRACE_S = 30.0


def ctx_of(request: ClientRequest) -> Any:
    """What a tool's Context carries over HTTP: the Starlette request, whose scope holds it."""
    return SimpleNamespace(request_context=SimpleNamespace(request=SimpleNamespace(scope={SCOPE_KEY: request})))


@pytest.fixture
async def manager(fake_backend: Any, tmp_path: Path):
    async with SessionManager(idle_timeout_s=3600, model="offline", runs_dir=tmp_path, sandbox="fake", backend=fake_backend) as sessions:
        yield sessions


async def test_a_dropped_call_is_cancelled_and_releases_its_clients_sessions(manager: SessionManager) -> None:
    presence = Presence(manager, GRACE_S)
    named, other, strangers = await manager.open(), await manager.open(), await manager.open()
    presence.used(other.id, ClientRequest("mcp-1", "POST"))  # used last by the same MCP session
    presence.used(strangers.id, ClientRequest("mcp-2", "POST"))
    request = ClientRequest("mcp-1", "POST")
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.sleep(3600)

    call = asyncio.ensure_future(presence.call(ctx_of(request), work, named.id))
    await started.wait()
    request.dropped.set()
    with pytest.raises(ClientGone):
        await asyncio.wait_for(call, 30)
    assert manager.released(named.id) and manager.released(other.id) and manager.released(strangers.id) is None
    presence.came("mcp-1")  # the client is back: everything of its MCP session is kept
    assert manager.released(named.id) is None and manager.released(other.id) is None


async def test_an_open_answered_to_a_dropped_request_releases_the_new_session(manager: SessionManager) -> None:
    presence = Presence(manager, GRACE_S)
    request = ClientRequest(None, "POST")  # the 2026 wire: no MCP session to remember it by

    async def work() -> str:
        session = await manager.open()
        presence.used(session.id, request)
        request.dropped.set()  # the client went just as the open finished
        return session.id

    opened = await presence.call(ctx_of(request), work)
    assert manager.released(opened)
    presence.used(opened, ClientRequest(None, "POST"))  # any call naming it keeps it
    assert manager.released(opened) is None


async def test_a_call_answered_in_full_releases_nothing(manager: SessionManager) -> None:
    presence = Presence(manager, GRACE_S)
    session = await manager.open()

    async def work() -> int:
        return 42

    assert await presence.call(ctx_of(ClientRequest("mcp-1", "POST")), work, session.id) == 42
    assert await presence.call(SimpleNamespace(), work, session.id) == 42  # stdio: no request at all
    assert manager.released(session.id) is None
