"""Shell steps in the record are typed fields coderoom wrote (command, exit code, PTY session id,
wall time, output and how much of it was kept), for the agent's exec_command and write_stdin and
for a live session's exec; `export` and `rerun` read those fields and never the SDK's prose, which
only `record.legacy` parses, for records written before them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from agents.sandbox import Manifest
from agents.testing import assistant_message, function_call
from agents.tool_context import ToolContext
from recorded_run import kernel_run, shell_tools  # noqa: F401 (fixture)

from coderoom import Session
from coderoom.export.notebook import export_notebook
from coderoom.export.rerun import rerun
from coderoom.export.script import export_script
from coderoom.export.steps import load_steps
from coderoom.jobs import build_job
from coderoom.record import Recorder, legacy, read_record
from coderoom.record.events import MAX_SHELL_OUTPUT_CHARS, ShellResult, ToolResult
from coderoom.record.hooks import RecordingHooks
from coderoom.run import run_job
from coderoom.sandboxes.session import open_session
from core.test_run import scripted, shell

LONG = f"seq 1 {MAX_SHELL_OUTPUT_CHARS}"  # more characters than the record keeps


def shell_results(run_dir: Path) -> dict[str, ShellResult]:
    results = {}
    for event in read_record(run_dir).events:
        if isinstance(event, ToolResult) and event.name in ("exec_command", "write_stdin"):
            assert event.shell is not None, f"{event.call_id} has no shell result"
            results[event.call_id] = event.shell
    return results


@pytest.fixture
def no_prose(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's prose may not be parsed: the legacy parser fails the test if it is called."""

    def refuse(*args: object) -> None:
        raise AssertionError("the prose parser was called for a record with structured shell results")

    monkeypatch.setattr(legacy, "shell_from_prose", refuse)


async def test_a_runs_shell_calls_are_recorded_as_typed_fields(backend: str, tmp_path: Path, no_prose: None) -> None:
    model = scripted(
        shell("mkdir 'sub dir'; echo out; echo err >&2; exit 3", "c1"),
        [function_call("exec_command", {"cmd": "sleep 3; echo late", "yield_time_ms": 250}, call_id="c2")],
        shell(LONG, "c3"),
        [function_call("exec_command", {"cmd": "pwd", "workdir": "sub dir"}, call_id="c4")],
        [function_call("exec_command", {"cmd": "pwd", "workdir": "/etc"}, call_id="c5")],
        [assistant_message("done")],
    )  # fmt: skip
    job = build_job({"name": "t", "prompt": "p", "sandbox": {"backend": backend}})
    run_dir = tmp_path / "run"
    assert (await run_job(job, run_dir=run_dir, model=model)).ok
    got = shell_results(run_dir)

    assert (got["c1"].status, got["c1"].exit_code, got["c1"].session_id) == ("exited", 3, None)
    assert got["c1"].command == "mkdir 'sub dir'; echo out; echo err >&2; exit 3" and got["c1"].output == "out\nerr\n"
    assert 0 < got["c1"].wall_time_s < 30
    assert got["c2"].status == "running" and got["c2"].exit_code is None and got["c2"].session_id >= 0
    assert len(got["c3"].output) == MAX_SHELL_OUTPUT_CHARS < got["c3"].output_chars
    assert got["c3"].output_chars == len("\n".join(map(str, range(1, MAX_SHELL_OUTPUT_CHARS + 1)))) + 1
    assert (got["c4"].workdir, got["c4"].exit_code, got["c4"].output) == ("sub dir", 0, "/workspace/sub dir\n")
    assert got["c5"].status == "not_run" and got["c5"].workdir == "/etc"  # outside the workspace: refused
    assert "Chunk ID" not in "".join(result.output for result in got.values())

    steps = [step for step in load_steps(run_dir)[1] if step.kind == "shell"]
    assert [step.replayable for step in steps] == [True, False, True, True, False]
    assert [step.exit_code for step in steps] == [3, None, 0, 0, None]
    assert steps[2].output.endswith(f"[... {got['c3'].output_chars - MAX_SHELL_OUTPUT_CHARS} more characters not recorded ...]")
    script = export_script(run_dir, tmp_path / "replay.py").read_text()
    assert "# not replayed (still running when the agent moved on): 'sleep 3; echo late'" in script
    assert "# not replayed (it did not run): 'pwd'" in script
    assert "shell(r'''pwd''', workdir='sub dir')" in script
    cells = nbformat.read(export_notebook(run_dir, tmp_path / "run.ipynb"), as_version=4).cells
    shell_cells = [cell for cell in cells if cell.metadata.get("coderoom", {}).get("tool") == "exec_command"]
    assert [cell.metadata.coderoom.exit_code for cell in shell_cells] == [3, None, 0, 0, None]
    assert [output.text for output in shell_cells[1].outputs] == ["[still running when the tool returned]\n"]


async def test_a_pty_session_polled_with_write_stdin_is_recorded_with_its_session_id(tmp_path: Path, no_prose: None) -> None:
    recorder = Recorder(tmp_path)
    hooks = RecordingHooks(recorder)
    job = build_job({"name": "t", "prompt": "p", "sandbox": {"backend": "local"}})
    recorder.emit("run_start", job=job.model_dump(mode="json"))
    async with open_session(job.sandbox, Manifest()) as session:
        tools = shell_tools(session)

        async def call(call_id: str, name: str, arguments: dict[str, Any]) -> ShellResult:
            context = ToolContext(None, tool_name=name, tool_call_id=call_id, tool_arguments=json.dumps(arguments))
            await hooks.on_tool_start(context, None, tools[name])  # type: ignore[arg-type]
            result = await tools[name].on_invoke_tool(context, context.tool_arguments)
            await hooks.on_tool_end(context, None, tools[name], result)  # type: ignore[arg-type]
            return shell_results(tmp_path)[call_id]

        started = await call("c1", "exec_command", {"cmd": "read word; echo got $word; exit 5", "tty": True,
                                                    "yield_time_ms": 250})
        assert started.status == "running" and started.session_id is not None
        ended = await call("c2", "write_stdin", {"session_id": started.session_id, "chars": "hello\n",
                                                 "yield_time_ms": 5000})
        unknown = await call("c3", "write_stdin", {"session_id": 1, "chars": ""})
    recorder.emit("run_end", status="ok")
    recorder.close()
    assert (ended.status, ended.exit_code, ended.session_id, ended.command) == ("exited", 5, started.session_id, None)
    assert "got hello" in ended.output
    assert (unknown.status, unknown.session_id) == ("not_run", 1)  # no such session
    stdin = [step for step in load_steps(tmp_path)[1] if step.kind == "stdin"]
    assert "got hello" in stdin[0].output and "Process exited" not in stdin[0].output


def test_the_recorded_runs_export_and_rerun_without_the_prose_parser(kernel_run: Path, tmp_path: Path, no_prose: None) -> None:
    export_script(kernel_run, tmp_path / "replay.py")
    export_notebook(kernel_run, tmp_path / "run.ipynb")
    replay = asyncio.run(rerun(kernel_run, tmp_path / "rerun", backend="local", timeout=120))
    assert replay.ok, (replay.out_dir / "replay.log").read_text()


async def test_a_sessions_exec_is_recorded_as_typed_fields_not_prose(tmp_path: Path, no_prose: None) -> None:
    session = await Session.open(model="offline", sandbox="local", runs_dir=tmp_path / "runs")
    try:
        await session.exec("echo out; echo err >&2; exit 4")
        await session.exec(LONG)
        stopped = await session.exec("sleep 20", timeout=1)
    finally:
        run_dir = await session.close()
    assert stopped.timed_out and stopped.exit_code == 124
    first, long, timed_out = shell_results(run_dir).values()
    assert (first.status, first.exit_code, first.command, first.output) == ("exited", 4, "echo out; echo err >&2; exit 4", "out\nerr\n")
    assert 0 < first.wall_time_s < 30
    assert len(long.output) == MAX_SHELL_OUTPUT_CHARS < long.output_chars  # the same bound as the agent's calls
    assert (timed_out.status, timed_out.exit_code) == ("timed_out", 124)
    results = [e for e in read_record(run_dir).events if isinstance(e, ToolResult)]
    assert all("Chunk ID" not in result.output and result.origin == "client" for result in results)
    script = export_script(run_dir, tmp_path / "replay.py").read_text()
    assert "shell(r'''echo out; echo err >&2; exit 4''')" in script
