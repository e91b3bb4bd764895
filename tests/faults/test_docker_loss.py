"""A Docker sandbox whose owner is killed (kill -9) loses its workspace (a tmpfs in a container
that ends with its owner: `sandboxes.docker.bindings`), and the loss is named, never left
"unfinished": the next server on the runs folder, or `coderoom sandbox prune`, ends the run
`error` saying what was lost, and no container or binding is left. A kill while a session
closes ends `recovered` when its own save had finished. SIGTERM during a save finishes the save.

Real processes with the Docker engine: `coderoom mcp --http --sandbox docker` on 127.0.0.1 and
`coderoom run --sandbox docker` (a scripted model on 127.0.0.1), SIGKILLed by their pid at each
stage. Each test has a TMPDIR of its own, so only its bindings are seen.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backends import require_backend
from coderoom.record import read_record
from coderoom.recovery import CAUSE
from mcp_process import CLIENT, HttpServer, server_env, start_client, start_http
from openai_server import OpenAIServer, call, say

from .harness import COMMAND, clean_env, containers, events, start_run, tool_started

LOST = "it was a tmpfs in Docker container"
DEADLINE_S = 120.0
BIG = "head -c 30000000 /dev/urandom > big.bin && echo k > output/k.txt"


@pytest.fixture
def sessions_tmp(tmpdir_for_sessions: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    require_backend("docker")
    monkeypatch.setenv("TMPDIR", str(tmpdir_for_sessions))  # the servers' and prune's
    return tmpdir_for_sessions


def serve(runs: Path, cwd: Path) -> HttpServer:
    return start_http("--sandbox", "docker", "--pool", "0", "--runs", str(runs), cwd=cwd)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S:g} s: {what}"
        time.sleep(0.05)


def kill(server: HttpServer) -> int:
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(30)
    return server.process.pid


def restart_and_stop(runs: Path, cwd: Path) -> str:
    """What a restarted server says on stderr (its recoveries come before it listens)."""
    server = serve(runs, cwd)
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(60)
    return "".join(server.stderr)


def assert_lost(run_dir: Path, said: str) -> None:
    end = read_record(run_dir).events[-1]
    assert (end.type, end.status, end.cause, end.saved) == ("run_end", "error", CAUSE, [])
    assert end.error and end.error.startswith("the workspace was lost: ") and LOST in end.error
    assert f"lost '" in said and f"(run folder '{run_dir}', ended 'error')" in said


def no_leftovers(sessions_tmp: Path, owner: int) -> None:
    wait_until(lambda: not containers(owner), f"the containers of pid {owner} gone")
    assert not list(sessions_tmp.glob("coderoom-docker-*"))


def answered(client: subprocess.Popen[str], tool: str) -> None:
    line = client.stdout.readline() if client.stdout else ""
    assert line.strip() == f"answered {tool}", line


def test_a_kill_mid_cell_is_named_lost_by_the_restarted_server(sessions_tmp: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    server = serve(runs, tmp_path)
    client, sid = start_client(server, "auto", "run_python", json.dumps({"code": "open('output/a.txt', 'w').write('a')\nwhile True: pass"}))
    try:
        assert len(list(sessions_tmp.glob("coderoom-docker-*"))) == 1  # the binding, while it lives
        [run_dir] = runs.iterdir()
        wait_until(lambda: any(e["type"] == "tool_start" for e in events(run_dir)), "the cell")
        owner = kill(server)
    finally:
        client.kill()
        client.wait(30)
    assert read_record(run_dir).events[-1].type != "run_end"  # what the kill left: unfinished
    said = restart_and_stop(runs, tmp_path)
    assert_lost(run_dir, said)
    no_leftovers(sessions_tmp, owner)
    shown = subprocess.run([*COMMAND, "show", str(run_dir)], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert LOST in " ".join(shown.stdout.split()) and "owner process ended" in shown.stdout


def test_a_kill_while_opening_leaves_no_session_unnamed(sessions_tmp: Path, tmp_path: Path) -> None:
    """Killed as soon as the run folder exists: either the session never opened (no
    session_open: nobody was given its id, nothing was written in it) or its loss is named."""
    runs = tmp_path / "runs"
    server = serve(runs, tmp_path)
    opening = subprocess.Popen([sys.executable, str(CLIENT), server.url, server.token, "auto"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=server_env())
    try:
        wait_until(lambda: runs.is_dir() and any(runs.iterdir()), "the run folder")
        owner = kill(server)
    finally:
        opening.kill()
        opening.wait(30)
    [run_dir] = runs.iterdir()
    said = restart_and_stop(runs, tmp_path)
    kinds = [e.type for e in read_record(run_dir).events]
    if kinds[-1] == "run_end":
        assert_lost(run_dir, said)
    else:
        assert "session_open" not in kinds and "lost '" not in said
    no_leftovers(sessions_tmp, owner)


def closing_a_big_workspace(server: HttpServer, runs: Path) -> tuple[subprocess.Popen[str], Path]:
    """A client whose session has 30 MB in its workspace and output/k.txt, once close_session's save has begun."""
    client, sid = start_client(server, "auto", "exec", json.dumps({"command": BIG}), "close_session", "{}")
    answered(client, "exec")
    [run_dir] = runs.iterdir()
    wait_until(lambda: (run_dir / "workspace.tar.partial").exists() or (run_dir / "workspace.tar").exists(), "the save")
    return client, run_dir


def test_a_kill_while_closing_is_recovered_or_named_lost(sessions_tmp: Path, tmp_path: Path) -> None:
    """Killed while close_session saves: a save that had finished is kept (`recovered`, with what
    the run folder holds), one that had not is named lost; never a partial archive."""
    runs = tmp_path / "runs"
    server = serve(runs, tmp_path)
    client, run_dir = closing_a_big_workspace(server, runs)
    try:
        owner = kill(server)
    finally:
        client.kill()
        client.wait(30)
    said = restart_and_stop(runs, tmp_path)
    end = read_record(run_dir).events[-1]
    assert end.type == "run_end"
    if end.status == "recovered":  # the save had finished before the kill
        assert end.cause == CAUSE and end.saved[:1] == ["workspace.tar"] and (run_dir / "workspace.tar").is_file()
    elif end.status == "error":
        assert_lost(run_dir, said)
    else:  # the close had ended the record itself
        assert end.status == "ok" and "workspace.tar" in end.saved
    assert not (run_dir / "workspace.tar.partial").exists()
    no_leftovers(sessions_tmp, owner)


def test_prune_names_the_lost_workspace_of_a_killed_one_shot_run(sessions_tmp: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    steps = [call("exec_command", cmd="echo kept > made.txt"), call("exec_command", cmd="sleep 60"), say("never")]
    with OpenAIServer(steps) as model:
        run = start_run(model, run_dir, "docker", "hello")
        try:
            run.wait_for_event(tool_started("exec_command", "sleep 60"), "the sleep command")
        finally:
            run.process.send_signal(signal.SIGKILL)
            run.finish()
    assert read_record(run_dir).events[-1].type != "run_end"
    done = subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert_lost(run_dir, done.stdout)
    no_leftovers(sessions_tmp, run.process.pid)


def test_sigterm_during_a_save_finishes_it(sessions_tmp: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    server = serve(runs, tmp_path)
    client, run_dir = closing_a_big_workspace(server, runs)
    try:
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(90) == 143
    finally:
        client.kill()
        client.wait(30)
    end = read_record(run_dir).events[-1]
    assert end.type == "run_end" and end.status in ("ok", "interrupted"), end
    assert {"workspace.tar", "output/k.txt"} <= set(end.saved) and (run_dir / "workspace.tar").stat().st_size > 30_000_000
    assert not (run_dir / "workspace.tar.partial").exists()
    no_leftovers(sessions_tmp, server.process.pid)
