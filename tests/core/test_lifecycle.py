"""One run lifecycle: a one-shot run, a live session and MCP's run_job end the same way.

A fault is injected at each step of `lifecycle.RunLifecycle` (the sandbox's start, the staging of
the inputs, the save, a cancel while staging or starting); each surface then leaves the same
run_end (status, error, signal, what was saved) and no sandbox behind: every session that
started is closed and its host folder is gone. The sandbox is the real local one (bubblewrap).
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from backends import require_backend
from coderoom import lifecycle
from coderoom.batch.manifest import BatchEntry
from coderoom.batch.runner import run_one
from coderoom.jobs import build_job
from coderoom.lifecycle import NOTHING_SAVED, RunLifecycle
from coderoom.mcp_server.policy import ReadPolicy
from coderoom.mcp_server.tools import ServerSettings, _run_job
from coderoom.record import read_record
from coderoom.run import run_job
from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.local import host_dir
from coderoom.sandboxes.sdk_session_adapter import backend_session
from coderoom.sandboxes.session import HeldSession
from coderoom.service import Session

DATA = b"a,b\n1,2\n"
Surface = Callable[[Path], Awaitable[Any]]


async def one_shot_run(base: Path) -> None:
    host = base / "a.csv"
    host.write_bytes(DATA)
    job = build_job({"name": "t", "prompt": "hello", "inputs": {"input/a.csv": host},
                     "model": "offline", "sandbox": {"backend": "local"}})
    await run_job(job, run_dir=base / "runs" / "run")


async def live_session(base: Path) -> None:
    session = await Session.open(model="offline", files={"input/a.csv": DATA}, runs_dir=base / "runs")
    await session.close()


class ProgressTaker:
    """The MCP request context `_run_job` tells its progress to (only `report_progress` is used)."""

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        pass


async def mcp_run_job(base: Path) -> None:
    settings = ServerSettings(model="offline", sandbox="local", limits=Limits(), runs_dir=base / "runs",
                              policy=ReadPolicy([]))
    await _run_job(settings, "hello", [], None, {"input/a.csv": base64.b64encode(DATA).decode()},
                   ProgressTaker())  # type: ignore[arg-type]


SURFACES = {"run": one_shot_run, "session": live_session, "mcp run_job": mcp_run_job}


async def batch_job(base: Path) -> None:
    job = build_job({"name": "t", "prompt": "hello", "model": "offline", "sandbox": {"backend": "local"}})
    await run_one(BatchEntry("t", job, "test"), base / "runs" / "t", {})


def injected(exc_type: type[BaseException] = OSError) -> BaseException:
    if exc_type is asyncio.CancelledError:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        return asyncio.CancelledError()
    return exc_type("injected")


def fail_start(monkeypatch: pytest.MonkeyPatch, cancel: bool = False) -> None:
    async def start(cls: type[HeldSession], *_args: Any) -> HeldSession:
        if cancel:
            injected(asyncio.CancelledError)
            await asyncio.sleep(0)  # the cancel lands here
        raise injected()

    monkeypatch.setattr(HeldSession, "start", classmethod(start))


def fail_stage(monkeypatch: pytest.MonkeyPatch, cancel: bool = False) -> None:
    stage = RunLifecycle.stage

    async def staged_then_fault(staging: Awaitable[Any]) -> Any:
        await staging  # the surface's own staging ran, then the fault
        if cancel:
            injected(asyncio.CancelledError)
            await asyncio.sleep(0)
        raise injected()

    async def failing(self: RunLifecycle, staging: Awaitable[Any]) -> Any:
        return await stage(self, staged_then_fault(staging))

    monkeypatch.setattr(RunLifecycle, "stage", failing)


def fail_save(monkeypatch: pytest.MonkeyPatch) -> None:
    async def save_workspace(*_args: Any, **_kwargs: Any) -> None:
        raise injected()

    monkeypatch.setattr(lifecycle, "save_workspace", save_workspace)


# fault -> (how to inject it, the run_end every surface must leave: status, error, signal,
# incomplete, whether workspace.tar was saved)
FAULTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], tuple[Any, ...]]] = {
    "sandbox start fails": (fail_start, ("error", "the sandbox did not start: OSError: injected", None, None, False)),
    "staging fails": (fail_stage, ("error", "the inputs were not staged, so the run did not open: OSError: injected",
                                   None, None, True)),
    "save fails": (fail_save, ("error", "the workspace was not saved: OSError: injected", None, None, False)),
    "cancelled while starting": (lambda mp: fail_start(mp, cancel=True),
                                 ("interrupted", "interrupted", None, NOTHING_SAVED, False)),
    "cancelled while staging": (lambda mp: fail_stage(mp, cancel=True),
                                ("interrupted", "interrupted", None, None, True)),
}


@pytest.fixture(autouse=True)
def local_sandbox() -> None:
    require_backend("local")


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[HeldSession]:
    """Every sandbox session a surface starts (patched before any fault, which may replace it)."""
    held: list[HeldSession] = []
    start = HeldSession.start.__func__  # type: ignore[attr-defined]

    async def recording(cls: type[HeldSession], *args: Any) -> HeldSession:
        held.append(await start(cls, *args))
        return held[-1]

    monkeypatch.setattr(HeldSession, "start", classmethod(recording))
    return held


def ending(base: Path) -> tuple[Any, ...]:
    [run_dir] = (base / "runs").iterdir()
    end = read_record(run_dir).events[-1]
    assert end.type == "run_end"
    return end.status, end.error, end.signal, end.incomplete, "workspace.tar" in end.saved


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("surface", SURFACES)
async def test_a_fault_at_any_step_ends_every_surface_alike_and_leaves_no_sandbox(
    surface: str, fault: str, started: list[HeldSession], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    inject, expected = FAULTS[fault]
    inject(monkeypatch)
    task = asyncio.ensure_future(SURFACES[surface](tmp_path))
    try:
        await task
    except (OSError, asyncio.CancelledError):
        pass  # a session's open raises what failed it; a run reports it in its result
    assert ending(tmp_path) == expected
    for held in started:
        assert held.closed and not backend_session(held.session).host_dir.exists()


@pytest.mark.parametrize("surface", SURFACES)
async def test_without_a_fault_every_surface_saves_and_closes(
    surface: str, started: list[HeldSession], tmp_path: Path
) -> None:
    await SURFACES[surface](tmp_path)
    status, error, signal, incomplete, saved = ending(tmp_path)
    # the offline analyst declines "hello" (run and run_job fail); a session without asks is ok
    assert (signal, incomplete, saved) == (None, None, True)
    assert (status, error is None) == (("ok", True) if surface == "session" else ("failed", False))
    assert len(started) == 1
    assert started[0].closed and not backend_session(started[0].session).host_dir.exists()


@pytest.mark.parametrize("surface", [*SURFACES, "batch"])
async def test_every_surface_tells_its_sandbox_which_run_it_serves(
    surface: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What recovery after a kill -9 needs (`coderoom.recovery`): the sandbox folder names the
    run folder and the run_start's run_id, written once the sandbox started, by every surface."""
    bound: list[tuple[Path, str] | None] = []
    bind_run = host_dir.bind_run

    def bind_and_read_back(folder: Path, run_dir: Path, owner: str) -> None:
        bind_run(folder, run_dir, owner)
        bound.append(host_dir.bound_run(folder))  # as recovery will read it

    monkeypatch.setattr(host_dir, "bind_run", bind_and_read_back)
    await {**SURFACES, "batch": batch_job}[surface](tmp_path)
    [run_dir] = (tmp_path / "runs").iterdir()
    start = read_record(run_dir).events[0]
    assert start.type == "run_start" and start.run_id
    assert bound == [(run_dir.resolve(), start.run_id)]
