"""A vanished MCP HTTP client (issue 20): a real `coderoom mcp --http` on 127.0.0.1 and a client
process (`vanishing_client.py`, the `mcp` SDK's own client) killed with SIGKILL, so its
connections drop with no cancellation and no DELETE. Its call in flight is cancelled (a cell
interrupted, the kernel kept; a command stopped) and the session is closed and saved once the
`--client-grace` has passed, long before the idle timeout; a client that comes back within the
grace keeps the session and its variables. Both wires of the SDK: "legacy" (an MCP session,
Mcp-Session-Id, an event stream) and "auto" (the 2026 single-exchange POSTs its client picks)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from coderoom.record import read_record
from coderoom.service.session import CANCELLED
import mcp_process
from mcp_process import HttpServer
from test_mcp import text_of

DEADLINE_S = 90.0  # generous: CI runs on two busy cores
GRACE_S = 2.0
SLOW = "x = 41\nopen('output/before.txt', 'w').write('kept')\nwhile True: pass"


def start_client(server: HttpServer, mode: str, tool: str, argument: str) -> tuple[subprocess.Popen[str], str]:
    """The client process, once it has opened its session and sent the call; and the session id."""
    return mcp_process.start_client(server, mode, tool, json.dumps({"code" if tool == "run_python" else "command": argument}))


def events(runs: Path) -> list[dict]:
    [run_dir] = runs.iterdir()
    return [json.loads(line) for line in (run_dir / "run.jsonl").read_text().splitlines() if line.strip()]


def wait_for(runs: Path, kind: str) -> list[dict]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        seen = events(runs)
        if any(e["type"] == kind for e in seen):
            return seen
        time.sleep(0.2)
    raise AssertionError(f"no {kind} in the record within {DEADLINE_S:g} s: {[e['type'] for e in events(runs)]}")


def serve(http_server, tmp_path: Path, grace: float = GRACE_S) -> tuple[HttpServer, Path]:
    runs = tmp_path / "runs"
    # a long idle timeout and command limit: only the vanished client's rules can end the call or the session
    return http_server("--runs", str(runs), "--client-grace", str(grace), "--idle-timeout", "3600",
                       "--timeout", "600"), runs


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(30)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_client_killed_mid_cell_has_the_cell_interrupted_and_the_session_saved_after_the_grace(
    http_server, tmp_path: Path, mode: str,
) -> None:
    server, runs = serve(http_server, tmp_path)
    client, sid = start_client(server, mode, "run_python", SLOW)
    wait_for(runs, "tool_start")
    time.sleep(1.0)  # the cell is in its loop
    kill(client)
    seen = wait_for(runs, "run_end")  # a cell still running would hold the session (busy) for 600 s
    [result] = [e for e in seen if e["type"] == "tool_result"]
    assert result["output"] == CANCELLED
    end = seen[-1]
    assert end["status"] == "ok" and {"workspace.tar", "output/before.txt"} <= set(end["saved"])
    [run_dir] = runs.iterdir()
    assert (run_dir / "output" / "before.txt").read_text() == "kept"
    assert server.process.poll() is None  # the server serves on


def test_a_client_killed_mid_command_has_the_command_stopped_and_the_session_saved(http_server, tmp_path: Path) -> None:
    server, runs = serve(http_server, tmp_path)
    client, sid = start_client(server, "auto", "exec", "echo started > output/log.txt; sleep 600; echo late >> output/log.txt")
    wait_for(runs, "tool_start")
    time.sleep(1.0)
    kill(client)
    end = wait_for(runs, "run_end")[-1]
    assert end["status"] == "ok" and "output/log.txt" in end["saved"]
    [run_dir] = runs.iterdir()
    assert (run_dir / "output" / "log.txt").read_text() == "started\n"


async def test_a_client_back_within_the_grace_keeps_the_session_and_its_variables(http_server, tmp_path: Path) -> None:
    grace = 8.0
    server, runs = serve(http_server, tmp_path, grace=grace)
    async with server.client() as again:  # the client that comes back, ready before the first one dies
        client, sid = start_client(server, "auto", "run_python", SLOW)
        wait_for(runs, "tool_start")
        time.sleep(1.0)
        kill(client)
        wait_for(runs, "tool_result")  # the cell was cancelled: the session is released from now on
        after = await again.call_tool("run_python", {"session_id": sid, "code": "x + 1"})
        assert not after.is_error and "42" in text_of(after)
        assert "was cancelled and interrupted" in text_of(after) and "kept your variables" in text_of(after)
        time.sleep(grace * 1.5)  # past the grace: kept, since it was used within it
        assert "run_end" not in [e["type"] for e in events(runs)]
        still = await again.call_tool("run_python", {"session_id": sid, "code": "x"})
        assert not still.is_error and "41" in text_of(still)
        await again.call_tool("close_session", {"session_id": sid})
    assert read_record(next(runs.iterdir())).events[-1].status == "ok"


def test_a_legacy_client_killed_between_calls_loses_its_event_stream_and_its_session_is_saved(
    http_server, tmp_path: Path,
) -> None:
    server, runs = serve(http_server, tmp_path)
    client, sid = start_client(server, "legacy", "run_python", "x = 1")  # answered: nothing in flight
    wait_for(runs, "tool_result")
    time.sleep(1.0)
    assert client.poll() is None  # connected, idle, holding its MCP session's event stream (GET)
    kill(client)
    end = wait_for(runs, "run_end")[-1]
    assert end["status"] == "ok" and "workspace.tar" in end["saved"]
