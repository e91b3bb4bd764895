"""MCP cancellation interrupts a run_python cell, it does not kill the kernel: the `mcp` SDK's
client cancels a call (notifications/cancelled), the server's handler is cancelled, the cell gets
a KeyboardInterrupt and the session's variables stay. The server's tools in memory, a real
local sandbox."""

from __future__ import annotations

import asyncio
from pathlib import Path

from coderoom.sandboxes.registry import get_backend
from in_memory import in_memory_client
from test_mcp import session_id, text_of


async def test_a_cancelled_call_interrupts_the_cell_and_keeps_the_variables(tmp_path: Path) -> None:
    async with in_memory_client(get_backend("local"), tmp_path / "runs") as client:
        sid = session_id(await client.call_tool("open_session", {}))
        assert not (await client.call_tool("run_python", {"session_id": sid, "code": "x = 41"})).is_error
        call = asyncio.create_task(client.call_tool("run_python", {"session_id": sid, "code": "while True: pass"}))
        await asyncio.sleep(1.5)
        assert not call.done()
        call.cancel()
        await asyncio.gather(call, return_exceptions=True)
        after = await asyncio.wait_for(client.call_tool("run_python", {"session_id": sid, "code": "x + 1"}), 30)
        assert not after.is_error and "42" in text_of(after)
        assert "was cancelled and interrupted" in text_of(after) and "kept your variables" in text_of(after)
        await client.call_tool("close_session", {"session_id": sid})
