"""`coderoom mcp` with the `mcp` SDK's own client: a session opened with an allowed host file,
one DataFrame across run_python calls, a PNG back as image content, an artifact read as a
resource, close; the session's limits hold; a client without the token is refused; SIGTERM
closes and saves every session."""

from __future__ import annotations

import signal
import struct
import zlib
from pathlib import Path

import httpx2
import pytest
from mcp import Client

from coderoom.record import read_record
from conftest import stdio_server

CSV = "city,temp\nOslo,3\nRome,18\nCairo,31\n"
LOAD = "import pandas as pd\ndf = pd.read_csv('input/cities.csv')\nlen(df)"
PLOT = "import matplotlib.pyplot as plt\nplt.bar(df.city, df.temp)\nprint('hottest', df.temp.max())"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "cities.csv").write_text(CSV)
    return folder


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def session_id(result) -> str:
    assert not result.is_error, text_of(result)
    return text_of(result).split()[1]


async def analyse_and_close(client: Client, data: Path) -> Path:
    """The flow a calling agent follows; the run folder the session left."""
    opened = await client.call_tool("open_session", {"files": {"input/cities.csv": str(data / "cities.csv")}})
    sid = session_id(opened)
    loaded = await client.call_tool("run_python", {"session_id": sid, "code": LOAD})
    assert not loaded.is_error and "3" in text_of(loaded)
    plotted = await client.call_tool("run_python", {"session_id": sid, "code": PLOT})
    assert "hottest 31" in text_of(plotted)  # the DataFrame of the previous call
    images = [block for block in plotted.content if block.type == "image"]
    assert [i.mime_type for i in images] == ["image/png"]
    written = await client.call_tool("exec", {"session_id": sid, "command": "mkdir -p output && sort input/cities.csv > output/sorted.csv"})
    assert "exit code: 0" in text_of(written)
    listed = await client.list_resources()
    uri = f"coderoom://session/{sid}/output/sorted.csv"
    assert uri in [str(r.uri) for r in listed.resources]
    artifact = await client.read_resource(uri)
    import base64
    assert base64.b64decode(artifact.contents[0].blob).decode().startswith("Cairo,31")
    closed = await client.call_tool("close_session", {"session_id": sid})
    run_dir = Path(text_of(closed).split("run folder: ")[1].strip())
    again = await client.call_tool("run_python", {"session_id": sid, "code": "1"})
    assert again.is_error and "no live session" in text_of(again)
    return run_dir


async def test_a_calling_agent_analyses_a_csv_over_stdio(backend: str, data: Path, tmp_path: Path) -> None:
    params = stdio_server("--allow-read", str(data), "--runs", str(tmp_path / "runs"), "--sandbox", backend)
    async with Client(params) as client:
        run_dir = await analyse_and_close(client, data)
    events = read_record(run_dir).events
    assert events[-1].type == "run_end" and events[-1].status == "ok"
    assert [e.cell.number for e in events if e.type == "tool_result" and e.name == "run_python"] == [1, 2]
    assert (run_dir / "output/sorted.csv").is_file()


async def test_over_http_the_token_is_required(http_server, data: Path, tmp_path: Path) -> None:
    server = http_server("--allow-read", str(data), "--runs", str(tmp_path / "runs"))
    async with server.client() as client:
        await analyse_and_close(client, data)
        # the token never reaches a sandbox: not in any environment or command line it can see
        sid = session_id(await client.call_tool("open_session", {}))
        look = "env; cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'; grep -rs . /workspace | head -c 100000"
        seen = text_of(await client.call_tool("exec", {"session_id": sid, "command": look}))
        assert "PATH=" in seen and server.token not in seen
        await client.call_tool("close_session", {"session_id": sid})
    wrong = server.token[:-1] + ("A" if server.token[-1] != "A" else "B")
    for token in (None, wrong):
        with pytest.raises(Exception):  # the SDK's client cannot even initialize
            async with server.client(token) as client:
                await client.list_tools()
    # what the server answered each of them, on the wire
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}
    accept = {"Accept": "application/json, text/event-stream"}
    for token, status in ((None, 401), (wrong, 401), (server.token.upper(), 401), (server.token, 200)):
        headers = {**accept, **({"Authorization": f"Bearer {token}"} if token is not None else {})}
        assert httpx2.post(server.url, json=initialize, headers=headers, timeout=30).status_code == status, token
    assert len(list((tmp_path / "runs").iterdir())) == 2  # the refused clients opened nothing


async def test_sigterm_closes_and_saves_every_live_session(http_server, data: Path, tmp_path: Path) -> None:
    server = http_server("--runs", str(tmp_path / "runs"))
    async with server.client() as client:
        sid = session_id(await client.call_tool("open_session", {"uploads": {"input/x.txt": "aGk="}}))
        await client.call_tool("run_python", {"session_id": sid, "code": "kept = 1"})
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(60) == 143
    [run_dir] = (tmp_path / "runs").iterdir()
    end = read_record(run_dir).events[-1]
    assert (end.type, end.status, end.signal) == ("run_end", "interrupted", "SIGTERM")
    assert "workspace.tar" in end.saved


async def test_the_sessions_limits_and_the_read_policy_hold(data: Path, tmp_path: Path) -> None:
    (data / "escape").symlink_to("/etc/hostname")
    outside = tmp_path / "secret.txt"
    outside.write_text("not for the client")
    params = stdio_server("--allow-read", str(data), "--runs", str(tmp_path / "runs"), "--timeout", "3",
                          "--max-sessions", "1")
    async with Client(params) as client:
        for path in (str(outside), str(data / "escape"), str(data / ".." / "secret.txt"), "/etc/passwd"):
            refused = await client.call_tool("open_session", {"files": {"input/x": path}})
            assert refused.is_error and "secret" not in text_of(refused).replace("secret.txt", "")
        sid = session_id(await client.call_tool("open_session", {}))
        full = await client.call_tool("open_session", {})
        assert full.is_error and "max_sessions" in text_of(full)
        slow = await client.call_tool("run_python", {"session_id": sid, "code": "import time\nkept = 5\ntime.sleep(60)"})
        assert slow.is_error and "interrupted" in text_of(slow)
        after = await client.call_tool("run_python", {"session_id": sid, "code": "kept * 2"})
        assert "10" in text_of(after)  # interrupted, not lost
        bomb = _png_header(30000, 30000)  # claims 900 megapixels
        await client.call_tool("write_file", {"session_id": sid, "path": "bomb.png",
                                              "base64_content": __import__("base64").b64encode(bomb).decode()})
        read = await client.call_tool("read_file", {"session_id": sid, "path": "bomb.png"})
        assert [block.type for block in read.content] != ["image"]
        await client.call_tool("close_session", {"session_id": sid})


def _png_header(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk + struct.pack(">I", zlib.crc32(chunk))


async def test_run_job_runs_a_whole_agent_with_the_servers_model(tmp_path: Path) -> None:
    energy = Path(__file__).resolve().parents[2] / "examples/building_energy/data"
    params = stdio_server("--allow-read", str(energy), "--runs", str(tmp_path / "runs"), "--model", "offline")
    async with Client(params) as client:
        done = await client.call_tool("run_job", {
            "request": "Find abnormal energy use in input/building_energy.csv and save output/anomalies.csv",
            "files": {"input/building_energy.csv": str(energy / "building_energy.csv")},
            "outputs": ["output/anomalies.csv"],
        })
        assert not done.is_error, text_of(done)
        assert "status: ok" in text_of(done) and "abnormal event" in text_of(done)
        [link] = [block for block in done.content if block.type == "resource_link"]
        artifact = await client.read_resource(str(link.uri))
        import base64
        header = base64.b64decode(artifact.contents[0].blob).decode().splitlines()[0]
        assert "start" in header
        escape = await client.call_tool("read_file", {"session_id": "x", "path": "y"})
        assert escape.is_error
        with pytest.raises(Exception):
            await client.read_resource(str(link.uri).replace("output/anomalies.csv", "run.jsonl"))


@pytest.mark.parametrize(("args", "message"), [
    (["--http", "--host", "0.0.0.0"], "not a loopback address"),
    (["--http", "--host", "192.168.1.10"], "not a loopback address"),
    (["--allow-read", "/no/such/folder"], "not a folder"),
    (["--model", "nonsense:spec@"], "model"),
    (["--limit", "memory=1"], "--limit"),
])
def test_usage_errors_exit_2_before_anything_starts(args: list[str], message: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    from mcp_process import server_env

    done = subprocess.run([sys.executable, "-m", "coderoom", "mcp", *args, "--runs", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=120, env=server_env(), stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and not (tmp_path / "runs").exists()
