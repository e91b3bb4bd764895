"""The warm pool: sandboxes started ahead of need with numpy, pandas and matplotlib imported,
each handed to one session only and replaced, recycled when unclaimed too long, all closed at
shutdown; a session whose limits differ from the pool's starts its own."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

from coderoom import Session, WarmPool
from coderoom.record import read_record
from coderoom.sandboxes.leases import read_lease
from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.spec import SandboxSpec

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
