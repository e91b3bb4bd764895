"""Interrupt is not kill: cancelling a `run_python` cell (`Session.interrupt()`, or cancelling the
call itself, as an MCP client's cancellation does) interrupts it as Jupyter does and keeps the
kernel's variables; only a cell that ignores the interrupt for INTERRUPT_GRACE_S is killed, and
then the loss of state is named. Real sandboxes, every backend."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from coderoom import Session
from coderoom.record import read_record
from coderoom.tools.python_kernel import INTERRUPT_GRACE_S

IGNORES_SIGINT = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)"


async def started(session: Session, code: str) -> asyncio.Task:
    """The cell as a task, once the kernel is running it (it prints 'running' first)."""
    task = asyncio.create_task(session.run_python(code))
    await asyncio.sleep(1.0)
    assert not task.done(), task
    return task


async def test_interrupt_stops_the_cell_and_keeps_the_variables(backend: str, tmp_path: Path) -> None:
    session = await Session.open(model="offline", sandbox=backend, runs_dir=tmp_path / "runs")
    try:
        assert (await session.run_python("x = 41")).status == "ok"
        assert await session.interrupt() is False  # nothing running
        cell = await started(session, "while True: pass")
        began = time.monotonic()
        assert await session.interrupt() is True
        result = await asyncio.wait_for(cell, 30)
        assert time.monotonic() - began < INTERRUPT_GRACE_S
        assert result.status == "interrupted"
        assert "interrupted on request" in result.text and "KeyboardInterrupt" in result.text
        assert "variables are kept" in result.text and "STATE LOST" not in result.text
        after = await session.run_python("x + 1")
        assert after.status == "ok" and "42" in after.text
    finally:
        run_dir = await session.close()
    cells = [e.cell for e in read_record(run_dir).events if e.type == "tool_result" and e.cell]
    assert cells[1].status == "interrupted" and cells[1].interrupted_on_request
    assert cells[1].status_text == "interrupted on request"


async def test_a_cancelled_call_interrupts_its_cell_and_the_kernel_lives_on(backend: str, tmp_path: Path) -> None:
    session = await Session.open(model="offline", sandbox=backend, runs_dir=tmp_path / "runs")
    try:
        await session.run_python("x = 41")
        cell = await started(session, "while True: pass")
        cell.cancel()
        await asyncio.gather(cell, return_exceptions=True)
        assert cell.cancelled()
        after = await asyncio.wait_for(session.run_python("x + 1"), 30)
        assert after.status == "ok" and "42" in after.text
        assert "cell 2 was cancelled and interrupted" in after.text and "kept your variables" in after.text
    finally:
        run_dir = await session.close()
    results = [e for e in read_record(run_dir).events if e.type == "tool_result"]
    assert [r.call_id for r in results] == ["client-1", "client-2", "client-3"]
    assert "cancelled by the caller" in results[1].output


async def test_a_cell_that_ignores_the_interrupt_is_killed_and_the_loss_is_named(backend: str, tmp_path: Path) -> None:
    session = await Session.open(model="offline", sandbox=backend, runs_dir=tmp_path / "runs")
    try:
        await session.run_python("x = 41")
        cell = await started(session, IGNORES_SIGINT)
        began = time.monotonic()
        await session.interrupt()
        result = await asyncio.wait_for(cell, 30)
        assert INTERRUPT_GRACE_S <= time.monotonic() - began < INTERRUPT_GRACE_S + 10
        assert result.status == "restarted"
        assert "interrupted on request and did not stop" in result.text and "STATE LOST" in result.text
        # cancelled, not interrupted: the caller is gone, so the next result says it
        await session.run_python("y = 1")
        cancelled = await started(session, IGNORES_SIGINT)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        after = await asyncio.wait_for(session.run_python("'y' in globals()"), 30)
        assert "cell 4 was cancelled" in after.text and "STATE LOST" in after.text
        assert after.status == "ok" and "False" in after.text
    finally:
        await session.close()
