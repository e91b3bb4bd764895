"""The warm pool: sandboxes started ahead of need with numpy, pandas and matplotlib imported,
each handed to one session only and replaced, recycled when unclaimed too long, all closed at
shutdown; a session whose limits differ from the pool's starts its own. A sandbox killed from
outside is never handed out; a warm-up that fails says why, once, and is retried ever less often;
a small memory limit is memory, so the pool warms up at 256M (issue 20)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import tempfile
from pathlib import Path

import pytest

from coderoom import Session, WarmPool
from coderoom.record import read_record
from coderoom.sandboxes.leases import read_lease
from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.local import cgroup, host_dir
from coderoom.sandboxes.local.leases import recorded_group
from coderoom.sandboxes.spec import SandboxSpec
from coderoom.service import sandbox as live_sandbox

needs_cgroup = pytest.mark.skipif(cgroup.mode() is cgroup.Mode.NONE, reason="no memory cgroup: RLIMIT_AS = memory")
IMPORTED = "import sys\nprint(sorted(m for m in ('numpy', 'pandas', 'matplotlib.pyplot') if m in sys.modules))"


def my_local_sandboxes() -> set[Path]:
    """Local session folders this test process owns (by their lease)."""
    found = set()
    for folder in Path(tempfile.gettempdir()).glob("coderoom-local-*"):
        lease = read_lease(folder)
        if lease is not None and lease.pid == os.getpid():
            found.add(folder)
    return found


async def test_a_pooled_sandbox_is_warm_used_once_and_replaced(tmp_path: Path) -> None:
    before = my_local_sandboxes()
    pool = WarmPool(size=1, max_idle_s=600, spec=SandboxSpec(backend="local"))
    await pool.start()
    try:
        await pool.wait_ready(120)
        session = await Session.open(model="offline", runs_dir=tmp_path, pool=pool)
        first = await session.run_python(IMPORTED)
        assert "['matplotlib.pyplot', 'numpy', 'pandas']" in first.text and first.cell.number == 1
        unbound = await session.run_python("sorted(n for n in ('numpy', 'pandas', 'matplotlib', '_m') if n in globals())")
        assert unbound.text.endswith("[]")  # imported, but no name a cold kernel would lack
        await pool.wait_ready(120)  # a replacement, not the same sandbox back
        other = await Session.open(model="offline", runs_dir=tmp_path, pool=pool)
        assert "'pandas'" in (await other.run_python(IMPORTED)).text  # the replacement is warm too
        await session.run_python("mine = 1")
        assert "NameError" in (await other.run_python("mine")).text  # never shared
        assert pool.claimed == 2
        different = await Session.open(model="offline", runs_dir=tmp_path, pool=pool, limits=Limits(timeout=30))
        assert pool.claimed == 2  # another spec: a sandbox of its own
        for s in (session, other, different):
            await s.close()
        opened = [e for e in read_record(session.run_dir).events if e.type == "session_open"]
        assert opened[0].pooled and not [e for e in read_record(different.run_dir).events
                                         if e.type == "session_open"][0].pooled
    finally:
        await pool.close()
    assert my_local_sandboxes() == before  # the pool's waiting sandbox closed too


async def test_an_unclaimed_sandbox_is_recycled(tmp_path: Path) -> None:
    pool = WarmPool(size=1, max_idle_s=1.0, spec=SandboxSpec(backend="local"))
    await pool.start()
    try:
        await pool.wait_ready(120)
        first = set(my_local_sandboxes())
        for _ in range(200):
            if pool.recycled >= 1 and pool.ready == 1:
                break
            await asyncio.sleep(0.1)
        assert pool.recycled >= 1 and pool.ready == 1
        assert not {f for f in first if f.exists()}  # the stale one is gone, not reused
    finally:
        await pool.close()


async def test_a_sandbox_still_warming_up_at_shutdown_is_closed_with_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool closed while its warm-up cell runs (a slow import) leaves no sandbox behind."""
    monkeypatch.setattr(live_sandbox, "WARM_IMPORTS", "import time\ntime.sleep(600)\n")
    before = my_local_sandboxes()
    pool = WarmPool(size=1, spec=SandboxSpec(backend="local"))
    await pool.start()
    try:
        warming = await _warming_up(before)
        assert warming.is_dir() and pool.ready == 0
    finally:
        await pool.close()
    assert my_local_sandboxes() == before


async def _warming_up(before: set[Path]) -> Path:
    """The pool's one new sandbox, once its kernel runs the warm-up cell."""
    for _ in range(1200):
        new = my_local_sandboxes() - before
        if len(new) == 1 and recorded_group(next(iter(new)) / host_dir.BWRAP_FILE) is not None:
            folder = next(iter(new))
            if kernel_pids(folder):
                return folder
        await asyncio.sleep(0.1)
    raise AssertionError("no sandbox began its warm-up within 120 s")

def kernel_pids(folder: Path) -> list[int]:
    """Host PIDs of the run_python kernel (supervisor and worker) of the sandbox in `folder`."""
    bwrap_pid = recorded_group(folder / host_dir.BWRAP_FILE)
    assert bwrap_pid is not None
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            pid, rest = stat.read_text().split(" (", 1)
            parents[int(pid)] = int(rest.rsplit(") ", 1)[1].split()[1])

    def under_bwrap(pid: int) -> bool:
        while pid > 1:
            if pid == bwrap_pid:
                return True
            pid = parents.get(pid, 0)
        return False

    found = []
    for pid in parents:
        with contextlib.suppress(OSError):
            if b"kernel_server.py" in Path(f"/proc/{pid}/cmdline").read_bytes() and under_bwrap(pid):
                found.append(pid)
    return found


@needs_cgroup
async def test_a_pool_at_256M_warms_up_and_its_session_imports_pandas(tmp_path: Path) -> None:
    limits = Limits(memory="256M")
    pool = WarmPool(size=1, spec=SandboxSpec(backend="local", limits=limits))
    await pool.start()
    try:
        await pool.wait_ready(60)
        assert pool.failures == 0 and pool.last_error is None
        session = await Session.open(model="offline", runs_dir=tmp_path, pool=pool, limits=limits)
        cell = await session.run_python("import pandas\nprint(pandas.DataFrame({'a': [1, 2]}).a.sum())")
        assert pool.claimed == 1 and cell.status == "ok" and cell.text.rstrip().endswith("3"), cell.text
        await session.close()
    finally:
        await pool.close()


async def test_a_warm_sandbox_killed_from_outside_is_not_handed_out(tmp_path: Path) -> None:
    before = my_local_sandboxes()
    pool = WarmPool(size=1, spec=SandboxSpec(backend="local"))
    await pool.start()
    try:
        await pool.wait_ready(120)
        [folder] = my_local_sandboxes() - before
        pids = kernel_pids(folder)
        assert len(pids) == 2  # the kernel's supervisor and its worker
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        session = await Session.open(model="offline", runs_dir=tmp_path, pool=pool)
        first = await session.run_python("print(6 * 7)")
        assert first.status == "ok" and first.text.rstrip().endswith("42"), first.text
        assert "lost" not in first.text.lower() and "gone" not in first.text.lower()
        assert pool.dead == 1 and pool.claimed == 0  # checked, closed, and the session started its own
        assert not folder.exists()
        await session.close()
    finally:
        await pool.close()


async def test_a_warm_up_that_always_fails_is_reported_once_and_retried_less_and_less_often(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(live_sandbox, "WARM_IMPORTS", "import no_such_module_for_the_pool\n")
    waits: list[float] = []

    async def clock(seconds: float) -> None:  # the pool's waits, recorded instead of slept
        waits.append(seconds)
        await asyncio.sleep(0)

    pool = WarmPool(size=1, spec=SandboxSpec(backend="local"), retry_base_s=5, retry_max_s=40, sleep=clock)
    with caplog.at_level(logging.WARNING, logger="coderoom.service.pool"):
        await pool.start()
        try:
            for _ in range(1200):
                if len(waits) >= 5:
                    break
                await asyncio.sleep(0.1)
        finally:
            await pool.close()
    assert waits[:5] == [5, 10, 20, 40, 40]  # doubling, capped
    reports = [r.getMessage() for r in caplog.records if "could not be started" in r.getMessage()]
    assert len(reports) == 1, reports  # once, not at every retry
    assert "No module named 'no_such_module_for_the_pool'" in reports[0]
    status = pool.status()
    assert status["failures"] >= 5 and "no_such_module_for_the_pool" in status["last_error"] and status["ready"] == 0
