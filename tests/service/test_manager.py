"""The session manager: a cap on live sessions, an idle timeout that closes (and records) a
forgotten session, clear errors for unknown ids, and nothing live after close_all. The sandbox
is not what these test: they run on the fake backend (`fake_backend`), without bubblewrap."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from coderoom import SessionManager
from coderoom.errors import TooManySessions, UnknownSession
from coderoom.record import read_record
from coderoom.service.events import SUBSCRIBER_QUEUE, EventHub
from coderoom.service.history import History
from coderoom.record.events import ExtractRefused


async def test_the_cap_holds_and_an_unknown_id_is_a_clear_error(fake_backend: Any, tmp_path: Path) -> None:
    async with SessionManager(max_sessions=2, model="offline", runs_dir=tmp_path, sandbox="fake", backend=fake_backend) as manager:
        first = await manager.open()
        await manager.open()
        with pytest.raises(TooManySessions, match="max_sessions"):
            await manager.open()
        assert manager.get(first.id) is first
        run_dir = await manager.close(first.id)
        with pytest.raises(UnknownSession, match="no live session"):
            manager.get(first.id)
        assert read_record(run_dir).events[-1].type == "run_end"
        await manager.open()  # room again
        live = manager.live
    assert manager.live == [] and all(s.closed for s in live)


async def test_an_idle_session_is_closed_and_its_record_kept(fake_backend: Any, tmp_path: Path) -> None:
    async with SessionManager(idle_timeout_s=0.6, model="offline", runs_dir=tmp_path, sandbox="fake", backend=fake_backend) as manager:
        busy, idle = await manager.open(), await manager.open()
        for _ in range(8):
            await busy.run_python("1")
            await asyncio.sleep(0.2)
        assert idle.closed and not busy.closed
        with pytest.raises(UnknownSession):
            manager.get(idle.id)
        assert read_record(idle.run_dir).events[-1].status == "ok"


async def test_a_released_session_is_closed_after_its_grace_unless_kept(fake_backend: Any, tmp_path: Path) -> None:
    async with SessionManager(idle_timeout_s=3600, model="offline", runs_dir=tmp_path, sandbox="fake", backend=fake_backend) as manager:
        gone, back, busy = await manager.open(), await manager.open(), await manager.open()
        for session in (gone, back, busy):
            manager.release_soon(session.id, 0.5)
        manager.keep(back.id)  # its client came back
        cell = asyncio.ensure_future(busy.exec("sleep 2"))  # a request in flight holds it past the grace
        await asyncio.sleep(1.5)
        assert gone.closed and not back.closed and not busy.closed
        assert manager.released(back.id) is None and manager.released(busy.id) == 0.0
        await cell
        await asyncio.sleep(1.0)
        assert busy.closed and not back.closed
        assert read_record(gone.run_dir).events[-1].status == "ok"


async def test_a_slow_subscriber_loses_the_oldest_events_and_is_told_how_many() -> None:
    hub = EventHub()
    stream = hub.subscribe()
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0)
    hub.publish(ExtractRefused(detail="first"))
    assert (await first).detail == "first"  # a subscriber that keeps up loses nothing
    for n in range(SUBSCRIBER_QUEUE + 5):  # a publisher never waits for a subscriber
        hub.publish(ExtractRefused(detail=str(n)))
    hub.close()
    got = [event async for event in stream]
    assert got[0].type == "events_lost" and got[0].count == 5
    assert [e.detail for e in got[1:]] == [str(n) for n in range(5, SUBSCRIBER_QUEUE + 5)]


def test_the_conversation_drops_whole_old_asks_past_its_bound() -> None:
    history = History(max_items=5)
    assert history.update(history.next_input("one") + [{"role": "assistant", "content": "1"}]) == 0
    assert history.update(history.next_input("two") + [{"role": "assistant", "content": "2"}]) == 0
    dropped = history.update(history.next_input("three") + [{"role": "assistant", "content": "3"}] * 2)
    assert dropped == 2 and history.items[0] == {"role": "user", "content": "two"}


async def test_a_slot_is_held_before_prepare_and_opens_take_turns(fake_backend: Any, tmp_path: Path) -> None:
    # W19: what an open reads (prepare) is read only with a slot held, at most MAX_CONCURRENT_OPENS at once
    from coderoom.service.manager import MAX_CONCURRENT_OPENS

    running, peak = 0, 0

    async def prepare() -> dict:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.3)
        running -= 1
        return {"files": {"input/a.txt": b"a"}}

    async with SessionManager(
        max_sessions=MAX_CONCURRENT_OPENS + 1, model="offline", runs_dir=tmp_path, sandbox="fake", backend=fake_backend,
    ) as manager:
        opened = await asyncio.gather(*(manager.open(prepare=prepare) for _ in range(MAX_CONCURRENT_OPENS + 1)))
        assert peak == MAX_CONCURRENT_OPENS and len(manager.live) == len(opened)

        async def never() -> dict:
            raise AssertionError("a full manager ran prepare")

        with pytest.raises(TooManySessions):
            await manager.open(prepare=never)
        await manager.close(opened[0].id)
        async with manager.slot():  # a whole run (MCP run_job) holds the freed place the same way
            with pytest.raises(TooManySessions):
                await manager.open(prepare=never)
