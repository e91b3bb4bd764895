"""Service boundary pass (attacksvc, 2026-12-02): PTY sessions started at once (SVC-P1).

MAX_LIVE_PROCESSES bounds the live processes of one sandbox (and with them the host memory
their output buffers take). The model's tool calls may run concurrently; `pty_exec_start`
checks the cap (`_make_room`) before an await and registers the session after it, so
concurrent starts all pass the check."""

from __future__ import annotations

import asyncio

import pytest

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.live import MAX_LIVE_PROCESSES
from coderoom.sandboxes.session import open_session

HOLD = (
    "python3 -c \"import fcntl, tempfile, time; "
    "f = tempfile.NamedTemporaryFile(dir='.', prefix='live.', delete=False); "
    "fcntl.flock(f, fcntl.LOCK_EX); time.sleep(40)\""
)
COUNT = (
    "python3 -c \"import fcntl, glob\n"
    "n = 0\n"
    "for p in glob.glob('live.*'):\n"
    "    f = open(p)\n"
    "    try: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "    except OSError: n += 1\n"
    "print(n)\""
)


async def test_concurrent_pty_starts_stay_within_max_live_processes(backend: str) -> None:
    async with open_session(SandboxSpec(backend=backend, limits=Limits(timeout=60))) as session:
        await asyncio.gather(
            *[session.pty_exec_start(HOLD, tty=True, yield_time_s=0.3) for _ in range(2 * MAX_LIVE_PROCESSES)],
            return_exceptions=True,
        )
        await asyncio.sleep(1)
        result = await session.exec(COUNT, shell=True)
        running = int(result.stdout.decode().strip())
        await session.pty_terminate_all()
    assert running <= MAX_LIVE_PROCESSES
