"""Recovery, not deletion (issue 20): a live session's workspace whose server was killed (kill -9)
is saved into its run folder by the next server on that runs folder, or by `coderoom sandbox
prune`, and the record ends `recovered`; so is a killed `coderoom run`'s; a session folder whose
run record points at another folder is never written through.

Real processes: `coderoom mcp --http` on 127.0.0.1 and `coderoom run` (a scripted model on
127.0.0.1) with the local sandbox, SIGKILLed by their pid. Each test has a TMPDIR of its own, so
only its session folders are seen.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tarfile
from pathlib import Path

import pytest

from coderoom.record import read_record
from coderoom.sandboxes import records
from coderoom.web.runs import list_runs
from mcp_process import start_http

from openai_server import OpenAIServer, call, say

from .harness import COMMAND, clean_env, start_run, tool_started


@pytest.fixture
def sessions_tmp(tmpdir_for_sessions: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmpdir_for_sessions))  # the servers' and prune's
    return tmpdir_for_sessions


async def _killed_with_a_live_session(runs: Path, cwd: Path) -> Path:
    """Start a server, open a session, make a file in its workspace, SIGKILL the server: its run folder."""
    server = start_http("--sandbox", "local", "--pool", "0", "--runs", str(runs), cwd=cwd)
    try:
        async with server.client() as client:
            opened = await client.call_tool("open_session", {"uploads": {"input/x.txt": "aGk="}})
            sid = opened.content[0].text.split()[1]
            await client.call_tool("run_python", {"session_id": sid, "code": "open('made.txt', 'w').write('kept')"})
    finally:
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(30)
    [run_dir] = runs.iterdir()
    assert read_record(run_dir).events[-1].type != "run_end"  # what a kill -9 leaves: unfinished
    return run_dir


def _archived(run_dir: Path) -> dict[str, bytes]:
    with tarfile.open(run_dir / "workspace.tar") as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _assert_recovered(run_dir: Path) -> None:
    end = read_record(run_dir).events[-1]
    assert (end.type, end.status, end.error) == ("run_end", "recovered", None)
    assert end.cause and "workspace.tar" in end.saved
    files = _archived(run_dir)
    assert files["made.txt"] == b"kept" and files["input/x.txt"] == b"hi"


async def test_a_restarted_server_recovers_the_killed_servers_session(sessions_tmp: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = await _killed_with_a_live_session(runs, tmp_path)
    server = start_http("--sandbox", "local", "--pool", "0", "--runs", str(runs), cwd=tmp_path)
    server.process.send_signal(signal.SIGTERM)  # its shutdown waits for its recovery (in the background)
    server.process.wait(300)
    said = "".join(server.stderr) + server.process.stderr.read()
    assert f"recovered '{sessions_tmp}/coderoom-local-" in said and f"into '{run_dir}'" in said
    _assert_recovered(run_dir)
    assert not list(sessions_tmp.glob("coderoom-local-*"))  # saved, then removed
    assert [run["status"] for run in list_runs(runs)] == ["recovered"]  # the page's past runs
    shown = subprocess.run([*COMMAND, "show", str(run_dir)], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert "run recovered" in shown.stdout and "owner process ended" in shown.stdout


async def test_prune_recovers_a_killed_servers_session_and_says_where(sessions_tmp: Path, tmp_path: Path) -> None:
    run_dir = await _killed_with_a_live_session(tmp_path / "runs", tmp_path)
    done = subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"into '{run_dir}' (workspace.tar" in done.stdout
    _assert_recovered(run_dir)
    assert not list(sessions_tmp.glob("coderoom-local-*"))


async def test_a_workspace_another_process_is_recovering_is_left_to_it(sessions_tmp: Path, tmp_path: Path) -> None:
    """Two recoverers on one workspace (a restarted server and the user's prune): while one holds
    it, the other neither ends its run nor removes it (before, the second prune removed what the
    first was still archiving); once the first is done, prune recovers it."""
    from coderoom.sandboxes import recovering

    run_dir = await _killed_with_a_live_session(tmp_path / "runs", tmp_path)
    (folder,) = sessions_tmp.glob("coderoom-local-*")
    with recovering.held(folder) as mine:
        assert mine
        busy = subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert busy.returncode == 0, busy.stderr
    assert recovering.BUSY in " ".join(busy.stdout.split()) + " ".join(busy.stderr.split())
    assert folder.is_dir() and read_record(run_dir).events[-1].type != "run_end"
    done = subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert f"into '{run_dir}' (workspace.tar" in done.stdout, done.stdout + done.stderr
    _assert_recovered(run_dir)
    assert not folder.exists()


def test_prune_recovers_a_killed_one_shot_run(sessions_tmp: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    steps = [call("exec_command", cmd="echo kept > made.txt"), call("exec_command", cmd="sleep 60"), say("never")]
    with OpenAIServer(steps) as server:
        run = start_run(server, run_dir, "local", "hello")
        try:
            run.wait_for_event(tool_started("exec_command", "sleep 60"), "the sleep command")
        finally:
            run.process.send_signal(signal.SIGKILL)
            run.finish()
    assert read_record(run_dir).events[-1].type != "run_end"
    done = subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"into '{run_dir}' (workspace.tar" in done.stdout
    end = read_record(run_dir).events[-1]
    assert (end.type, end.status, end.error) == ("run_end", "recovered", None)
    assert _archived(run_dir)["made.txt"] == b"kept\n"
    assert not list(sessions_tmp.glob("coderoom-local-*"))
    shown = subprocess.run([*COMMAND, "show", str(run_dir)], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert "run recovered" in shown.stdout and "owner process ended" in shown.stdout


@pytest.mark.parametrize("forgery", ["another run's folder", "a link to the run folder"])
async def test_a_run_record_pointing_elsewhere_is_not_written_through(
    sessions_tmp: Path, tmp_path: Path, forgery: str
) -> None:
    run_dir = await _killed_with_a_live_session(tmp_path / "runs", tmp_path)
    [folder] = sessions_tmp.glob("coderoom-local-*")
    owner = json.loads(records.read(folder, "run", 8192))["owner"]
    target = tmp_path / "elsewhere"
    if forgery == "another run's folder":  # a real record, but not the one of this session
        target.mkdir()
        (target / "run.jsonl").write_text(json.dumps({"type": "run_start", "job": {}}) + "\n")
    else:
        target.symlink_to(run_dir)
    records.write(folder, "run", json.dumps({"run_dir": str(target), "owner": owner}).encode(), replace=True)
    done = subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"not recovered '{folder}'" in done.stdout
    assert not (target / "workspace.tar").exists() and not (run_dir / "workspace.tar").exists()
    assert read_record(run_dir).events[-1].type != "run_end"
    assert not folder.exists()  # not saved, so removed by prune, as before
