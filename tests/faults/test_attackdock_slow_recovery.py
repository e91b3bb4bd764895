"""Attack pass D-R (2026-12-06): a dead owner's workspace whose recovery is slow held up the
restart of `serve`/`mcp`, which recovered before it listened (`SessionManager.__aenter__`).

Measured with the real Docker backend (docs/security.md, D-R8): 99,000 empty files with
200-character names under a 3,000-character path, written by sandbox code in 2 s within the
default limits, took 127 s to recover (load average 7 on 2 cores); each dead session adds its
own, up to the archive deadline (600 s) each, one after the other, before the server answers.
Here a recovery that does not end until the test ends stands in for it, so the specification runs in seconds:
the server must be ready while a recovery is still saving (it now recovers in the background,
and its shutdown waits for the recovery).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from coderoom.sandboxes.orphans import Orphan
from coderoom.sandboxes.spec import SandboxSpec
from coderoom.service.manager import SessionManager

READY_WITHIN_S = 10.0  # generous for coroutines in one process; the recovery below ends with the test


class SlowToRecover:
    """A backend with one dead owner's workspace whose reopening waits until `done` is set (then
    it gives no workspace, and the save fails: nothing is written)."""

    name = "local"

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.saving = asyncio.Event()
        self.done = asyncio.Event()

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        return None

    def abandoned_runs(self, spec: SandboxSpec) -> list[Orphan]:
        return [Orphan(self.run_dir.parent, self.run_dir, "r1", self._reopen)]

    @asynccontextmanager
    async def _reopen(self, *, remove_on_failure: bool) -> AsyncIterator[Any]:
        self.saving.set()
        await self.done.wait()
        yield None


async def test_a_restarted_server_is_ready_while_a_slow_recovery_runs(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "session-1"
    run_dir.mkdir(parents=True)
    (run_dir / "run.jsonl").write_text(json.dumps({"type": "run_start", "run_id": "r1", "job": {}}) + "\n")
    backend = SlowToRecover(run_dir)
    manager = SessionManager(runs_dir=run_dir.parent, backend=backend)  # type: ignore[arg-type]
    entering = asyncio.ensure_future(manager.__aenter__())
    try:
        await asyncio.wait_for(backend.saving.wait(), READY_WITHIN_S)
        done, _ = await asyncio.wait({entering}, timeout=READY_WITHIN_S)
        assert entering in done, "the server was not ready while a recovery was saving"
    finally:
        backend.done.set()
        entering.cancel()
        await asyncio.gather(entering, return_exceptions=True)
        await manager.close_all()
