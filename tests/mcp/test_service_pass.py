"""Findings of the service attack pass on `coderoom mcp`, each against the real server and the
`mcp` SDK's own client: listing resources is no use of a session (W11) and a whole run_job counts
against --max-sessions (W06), both on the server's tools in memory and the fake backend (the
sandbox is not what they test); a full server refuses an open before reading its files and one
open reads a bounded total (W19), and a loopback bind other than 127.0.0.1 keeps the
Host/Origin check (W13)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client

from coderoom.errors import RequestRefused
from coderoom.mcp_server import tools
from coderoom.mcp_server.policy import ReadPolicy
from coderoom.record import read_record
from conftest import stdio_server
from in_memory import in_memory_client
from test_mcp import session_id, text_of

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}


async def test_listing_resources_neither_keeps_sessions_alive_nor_writes_their_records(fake_backend: Any, tmp_path: Path) -> None:
    async with in_memory_client(fake_backend, tmp_path / "runs", idle_timeout_s=1.5) as client:
        sid = session_id(await client.call_tool("open_session", {"uploads": {"input/x.txt": "aGk="}}))
        for _ in range(30):  # 6 s of another client's listings, four times the idle timeout
            await client.list_resources()
            await asyncio.sleep(0.2)
        gone = await client.call_tool("run_python", {"session_id": sid, "code": "1"})
        assert gone.is_error and "no live session" in text_of(gone)
    [run_dir] = (tmp_path / "runs").iterdir()
    events = read_record(run_dir).events
    assert "files_listed" not in [e.type for e in events]
    assert events[-1].type == "run_end"


async def test_run_job_counts_against_max_sessions(fake_backend: Any, tmp_path: Path) -> None:
    async with in_memory_client(fake_backend, tmp_path / "runs", max_sessions=1, model="offline") as client:
        sid = session_id(await client.call_tool("open_session", {}))
        refused = await client.call_tool("run_job", {"request": "say hello"})
        assert refused.is_error and "max_sessions" in text_of(refused)
        assert len(list((tmp_path / "runs").iterdir())) == 1  # the refused run made no run folder
        await client.call_tool("close_session", {"session_id": sid})


async def test_a_full_server_refuses_an_open_before_reading_its_files(tmp_path: Path) -> None:
    allowed = tmp_path / "data"
    allowed.mkdir()
    params = stdio_server("--allow-read", str(allowed), "--runs", str(tmp_path / "runs"), "--max-sessions", "1")
    async with Client(params) as client:
        sid = session_id(await client.call_tool("open_session", {}))
        # a file that cannot be read: the cap, checked first, is the refusal, not the file
        full = await client.call_tool("open_session", {"files": {"input/a": str(allowed / "missing.csv")}})
        assert full.is_error and "max_sessions" in text_of(full), text_of(full)
        await client.call_tool("close_session", {"session_id": sid})
        missing = await client.call_tool("open_session", {"files": {"input/a": str(allowed / "missing.csv")}})
        assert missing.is_error and "max_sessions" not in text_of(missing)


async def test_one_open_reads_at_most_the_total_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools, "MAX_OPEN_TOTAL_BYTES", 3 * 1024**2)
    monkeypatch.setattr(tools, "MAX_UPLOAD_BYTES", 2 * 1024**2)
    for n in range(3):
        with open(tmp_path / f"f{n}", "wb") as handle:
            handle.truncate(2 * 1024**2 - 10)  # sparse: each under one file's bound, two over the total
    policy = ReadPolicy([tmp_path])
    one = await tools.gather_files(policy, {"input/f0": str(tmp_path / "f0")}, None)
    assert len(one["input/f0"]) == 2 * 1024**2 - 10
    with pytest.raises(RequestRefused, match="over"):
        await tools.gather_files(policy, {f"input/f{n}": str(tmp_path / f"f{n}") for n in range(3)}, None)
    upload = "A" * (4 * 1024**2 // 3 * 2)  # base64 of ~2 MiB: with f0, over the total
    with pytest.raises(RequestRefused, match="MAX_OPEN_TOTAL_BYTES"):
        await tools.gather_files(policy, {"input/f0": str(tmp_path / "f0")}, {"input/u": upload})


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
async def test_every_loopback_bind_checks_host_and_origin(http_server, host: str, tmp_path: Path) -> None:
    server = http_server("--host", host, "--runs", str(tmp_path / "runs"))
    port = server.url.split(":")[2].split("/")[0]
    base = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {server.token}"}
    for extra, status in (({"Host": f"evil.example:{port}"}, 421), ({"Origin": "http://evil.example"}, 403),
                          ({"Origin": f"http://{host}:{port}"}, 200), ({}, 200)):  # fmt: skip
        reply = httpx2.post(server.url, json=INITIALIZE, headers={**base, **extra}, timeout=30)
        assert reply.status_code == status, (extra, reply.text[:80])
    assert os.path.isdir(tmp_path / "runs") is False or not list((tmp_path / "runs").iterdir())
