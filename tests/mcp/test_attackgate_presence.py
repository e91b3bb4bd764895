"""Gate and presence pass (2026-12-06): two real clients of one `coderoom mcp --http`. One
client's vanishing, and requests carrying an MCP session id or a session id that is not theirs
to know (a DELETE, a dropped event stream, a dropped call), close no session of the other."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

import mcp_process
from test_mcp import text_of

GRACE_S = 2.0
DEADLINE_S = 90.0
SLOW = "while True: pass"


def ended_runs(runs: Path) -> int:
    count = 0
    for run in runs.iterdir() if runs.exists() else []:
        lines = (run / "run.jsonl").read_text().splitlines() if (run / "run.jsonl").exists() else []
        count += any(json.loads(line)["type"] == "run_end" for line in lines if line.strip())
    return count


async def test_another_client_vanishing_or_guessing_ids_closes_no_session_of_this_one(http_server, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    server = http_server("--runs", str(runs), "--client-grace", str(GRACE_S), "--idle-timeout", "3600", "--timeout", "600")
    async with server.client() as mine:
        opened = await mine.call_tool("open_session", {})
        sid = text_of(opened).split()[1]
        assert not (await mine.call_tool("run_python", {"session_id": sid, "code": "x = 41"})).is_error
        other, _ = mcp_process.start_client(server, "legacy", "run_python", json.dumps({"code": SLOW}))
        time.sleep(2.0)  # its cell runs
        other.send_signal(signal.SIGKILL)
        other.wait(30)
        headers = {"Authorization": f"Bearer {server.token}", "Accept": "text/event-stream, application/json",
                   "Content-Type": "application/json"}
        async with httpx2.AsyncClient(headers=headers, timeout=5) as raw:
            for _ in range(20):  # ids nobody gave this client
                guessed = {"mcp-session-id": uuid.uuid4().hex}
                await raw.delete(server.url, headers=guessed)
                try:
                    await raw.get(server.url, headers=guessed, timeout=0.2)
                except httpx2.TimeoutException:
                    pass
                call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": "exec", "arguments": {"session_id": uuid.uuid4().hex, "command": "true"}}}
                try:
                    await raw.post(server.url, json=call, headers=guessed, timeout=0.05)
                except httpx2.TimeoutException:
                    pass
        deadline = time.monotonic() + DEADLINE_S
        while ended_runs(runs) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert ended_runs(runs) == 1  # the vanished client's own session, saved after its grace
        await asyncio.sleep(GRACE_S * 2)
        assert ended_runs(runs) == 1
        still = await mine.call_tool("run_python", {"session_id": sid, "code": "x + 1"})
        assert not still.is_error and "42" in text_of(still)
    assert server.process.poll() is None


async def test_a_second_client_vanishing_mid_call_leaves_the_first_clients_shared_session_alive(
    http_server, tmp_path: Path,
) -> None:
    runs = tmp_path / "runs"
    server = http_server("--runs", str(runs), "--client-grace", str(GRACE_S), "--idle-timeout", "3600", "--timeout", "600")
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {server.token}"}, timeout=120)
    async with Client(streamable_http_client(server.url, http_client=http), mode="legacy") as mine:
        sid = text_of(await mine.call_tool("open_session", {})).split()[1]
        assert not (await mine.call_tool("run_python", {"session_id": sid, "code": "x = 41"})).is_error
        other, _ = mcp_process.start_client(server, "legacy", "--session", sid, "exec", json.dumps({"command": "sleep 600"}))
        time.sleep(2.0)  # its command runs
        other.send_signal(signal.SIGKILL)
        other.wait(30)
        deadline = time.monotonic() + GRACE_S * 3
        while time.monotonic() < deadline:  # the first client is here all along
            await mine.send_ping()
            await asyncio.sleep(0.3)
        assert ended_runs(runs) == 0
        still = await mine.call_tool("run_python", {"session_id": sid, "code": "x + 1"})
        assert not still.is_error and "42" in text_of(still)
