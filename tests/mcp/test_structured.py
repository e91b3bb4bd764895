"""`coderoom mcp` answers as data as well as text: every tool declares an output schema, every
result that is not an error carries `structuredContent` the SDK's client checks against it, a
failed cell or command is `isError`, a new session has output/, and `--print-config` prints a
configuration that starts the server from anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from conftest import stdio_server
from mcp_process import server_env

SESSION_TOOLS = {"run_python", "exec", "write_file", "read_file", "list_files", "close_session"}


async def test_every_tool_declares_what_its_structured_result_holds(tmp_path: Path) -> None:
    async with Client(stdio_server("--runs", str(tmp_path / "runs"))) as client:
        schemas = {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}
    assert set(schemas) == {"open_session", "run_job", *SESSION_TOOLS}
    for name in SESSION_TOOLS | {"open_session"}:
        assert "session_id" in schemas[name]["properties"], name
    assert {"status", "cell"} <= set(schemas["run_python"]["properties"])
    assert {"exit_code", "timed_out"} <= set(schemas["exec"]["properties"])
    assert {"status", "run_folder", "outputs"} <= set(schemas["run_job"]["properties"])
    assert "run_folder" in schemas["close_session"]["properties"]


async def test_a_session_answers_with_structured_results_and_errors_for_failures(backend: str, tmp_path: Path) -> None:
    params = stdio_server("--runs", str(tmp_path / "runs"), "--sandbox", backend, "--timeout", "20")
    async with Client(params) as client:
        opened = await client.call_tool("open_session", {"uploads": {"input/x.csv": "YSxiCjEsMgo="}})
        assert not opened.is_error
        sid = opened.structured_content["session_id"]
        assert f"session_id: {sid}" in opened.content[0].text  # the text still says it too
        assert opened.structured_content["files"] == ["input/x.csv"]
        assert opened.structured_content["output_dir"] == "output/"
        assert opened.structured_content["limits"]["timeout_s"] == 20

        listed = await client.call_tool("list_files", {"session_id": sid})
        kinds = {f["path"]: f["kind"] for f in listed.structured_content["files"]}
        assert kinds["output"] == "dir"  # there before anything wrote into it

        ok = await client.call_tool("run_python", {"session_id": sid, "code": "open('output/r.txt', 'w').write('hi')"})
        assert not ok.is_error
        assert ok.structured_content["status"] == "ok" and ok.structured_content["cell"] == 1
        assert ok.structured_content["session_id"] == sid

        failed = await client.call_tool("run_python", {"session_id": sid, "code": "1 / 0"})
        assert failed.is_error
        assert failed.structured_content["status"] == "error" and failed.structured_content["cell"] == 2
        assert "ZeroDivisionError" in failed.structured_content["text"]

        command = await client.call_tool("exec", {"session_id": sid, "command": "cat output/r.txt"})
        assert not command.is_error
        assert command.structured_content == {"session_id": sid, "exit_code": 0, "timed_out": False,
                                              "stdout": "hi", "stderr": "", "connections": []}
        broken = await client.call_tool("exec", {"session_id": sid, "command": "echo nope >&2; exit 3"})
        assert broken.is_error
        assert (broken.structured_content["exit_code"], broken.structured_content["stderr"]) == (3, "nope\n")

        written = await client.call_tool("write_file", {"session_id": sid, "path": "output/w.md", "text": "# w"})
        assert written.structured_content == {"session_id": sid, "path": "output/w.md", "size": 3}
        read = await client.call_tool("read_file", {"session_id": sid, "path": "output/w.md"})
        assert read.structured_content["uri"] == f"coderoom://session/{sid}/output/w.md"
        assert read.structured_content["size"] == 3

        closed = await client.call_tool("close_session", {"session_id": sid})
        assert closed.structured_content["session_id"] == sid
        assert (Path(closed.structured_content["run_folder"]) / "output/w.md").read_text() == "# w"

        gone = await client.call_tool("exec", {"session_id": sid, "command": "true"})
        assert gone.is_error and "no live session" in gone.content[0].text


async def test_run_job_reports_status_outputs_and_their_resources(tmp_path: Path) -> None:
    energy = Path(__file__).resolve().parents[2] / "examples/building_energy/data"
    params = stdio_server("--allow-read", str(energy), "--runs", str(tmp_path / "runs"), "--model", "offline")
    async with Client(params) as client:
        done = await client.call_tool("run_job", {
            "request": "Find abnormal energy use in input/building_energy.csv and save output/anomalies.csv",
            "files": {"input/building_energy.csv": str(energy / "building_energy.csv")},
            "outputs": ["output/anomalies.csv"],
        })
        assert not done.is_error
        job = done.structured_content
        assert job["status"] == "ok" and job["error"] is None
        [output] = job["outputs"]
        assert output["path"] == "output/anomalies.csv" and output["ok"]
        assert output["uri"] == f"coderoom://run/{Path(job['run_folder']).name}/output/anomalies.csv"
        assert (await client.read_resource(output["uri"])).contents

        declined = await client.call_tool("run_job", {"request": "Write me a poem", "outputs": ["output/poem.md"]})
        assert declined.is_error
        assert declined.structured_content["status"] != "ok"
        assert declined.structured_content["outputs"][0]["ok"] is False


def test_print_config_gives_a_configuration_that_starts_the_server_from_anywhere(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "coderoom", "mcp", "--print-config", "--allow-read", "data", "--runs", "runs",
         "--timeout", "30", "--package", "crtiny>=1", "--ray", "127.0.0.1:6379"],
        capture_output=True, text=True, timeout=120, env=server_env(), cwd=tmp_path, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["mcpServers"]["coderoom"]
    command = Path(entry["command"])
    assert command.is_absolute() and os.access(command, os.X_OK)
    assert entry["args"][-11:] == ["mcp", "--allow-read", str(tmp_path / "data"), "--runs", str(tmp_path / "runs"),
                                  "--timeout", "30", "--package", "crtiny>=1", "--ray", "127.0.0.1:6379"]
    assert not (tmp_path / "runs").exists()  # nothing was started, no cluster joined


async def test_the_printed_configuration_runs_as_a_client_would_start_it(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "coderoom", "mcp", "--print-config", "--runs", str(tmp_path / "runs")],
                          capture_output=True, text=True, timeout=120, env=server_env(), stdin=subprocess.DEVNULL)
    entry = json.loads(done.stdout)["mcpServers"]["coderoom"]
    bare = {k: v for k, v in server_env().items() if k not in ("PATH", "VIRTUAL_ENV")}  # a desktop client's PATH
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env={**bare, "PATH": "/usr/bin:/bin"},
                                   cwd=str(tmp_path))
    async with Client(params) as client:
        opened = await client.call_tool("open_session", {})
        await client.call_tool("close_session", {"session_id": opened.structured_content["session_id"]})
    assert len(list((tmp_path / "runs").iterdir())) == 1
