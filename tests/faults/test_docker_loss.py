"""A Docker sandbox whose owner is killed (kill -9) keeps its workspace for a recovery window
(`sandboxes.docker.bindings`, `rescue`): the next server on the runs folder, or `coderoom sandbox
prune`, saves it into the run folder (run_end `recovered` with the cause) and removes the
container. A container gone by then (its window passed) or that cannot be reached (frozen) is
named lost, saying why, and removed; a container with no run bound still ends with its owner.
SIGTERM during a save finishes the save.

Real processes with the Docker engine: `coderoom mcp --http --sandbox docker` on 127.0.0.1 and
`coderoom run --sandbox docker` (a scripted model on 127.0.0.1), SIGKILLed by their pid at each
stage. Each test has a TMPDIR of its own, so only its bindings are seen, and removes what its
killed owners left (by the owner label, by id) whatever the assertions found.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import require_backend
from coderoom.record import read_record
from coderoom.recovery import CAUSE
from mcp_process import CLIENT, HttpServer, server_env, start_client, start_http
from openai_server import OpenAIServer, call, say

from .harness import COMMAND, clean_env, containers, events, start_run, tool_started

LOST = "cannot be saved from: "
DEADLINE_S = 120.0
BIG = "head -c 30000000 /dev/urandom > big.bin && echo k > output/k.txt"


@pytest.fixture
def owners() -> Iterator[list[int]]:
    """Pids of the owners a test kills: their containers are removed (by id) at its end."""
    killed: list[int] = []
    yield killed
    for owner in killed:
        for container in containers(owner):
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=60)


@pytest.fixture
def sessions_tmp(tmpdir_for_sessions: Path, monkeypatch: pytest.MonkeyPatch, owners: list[int]) -> Path:
    require_backend("docker")
    monkeypatch.setenv("TMPDIR", str(tmpdir_for_sessions))  # the servers' and prune's
    return tmpdir_for_sessions


def serve(runs: Path, cwd: Path) -> HttpServer:
    return start_http("--sandbox", "docker", "--pool", "0", "--runs", str(runs), cwd=cwd)


def wait_until(condition, what: str, within: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within:g} s: {what}"
        time.sleep(0.05)


def kill(server: HttpServer, owners: list[int]) -> int:
    owners.append(server.process.pid)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(30)
    return server.process.pid


def restart_and_stop(runs: Path, cwd: Path) -> str:
    """What a restarted server says on stderr (it recovers in the background; its shutdown waits
    for that)."""
    server = serve(runs, cwd)
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(300)
    return "".join(server.stderr) + server.process.stderr.read()


def prune() -> str:
    done = subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, text=True, env=clean_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def in_archive(run_dir: Path) -> dict[str, bytes]:
    """The regular files of the run folder's workspace.tar and their contents."""
    with tarfile.open(run_dir / "workspace.tar") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def assert_recovered(run_dir: Path, said: str) -> None:
    end = read_record(run_dir).events[-1]
    assert (end.type, end.status, end.cause, end.error) == ("run_end", "recovered", CAUSE, None), end
    assert end.saved[:1] == ["workspace.tar"] and (run_dir / "workspace.tar").is_file()
    assert f"recovered '" in said and f"into '{run_dir}'" in said, said
    assert not (run_dir / "workspace.tar.partial").exists()


def assert_lost(run_dir: Path, said: str, why: str) -> None:
    end = read_record(run_dir).events[-1]
    assert (end.type, end.status, end.cause, end.saved) == ("run_end", "error", CAUSE, []), end
    assert end.error and end.error.startswith("the workspace was lost: ") and LOST in end.error and why in end.error
    assert f"lost '" in said and f"(run folder '{run_dir}', ended 'error')" in said, said


def no_leftovers(sessions_tmp: Path, owner: int) -> None:
    wait_until(lambda: not containers(owner), f"the containers of pid {owner} gone")
    assert not list(sessions_tmp.glob("coderoom-docker-*"))


def answered(client: subprocess.Popen[str], tool: str) -> None:
    line = client.stdout.readline() if client.stdout else ""
    assert line.strip() == f"answered {tool}", line


CELL = "open('kept.txt', 'w').write('before the kill')\nopen('output/a.txt', 'w').write('a')\nwhile True: pass"


def written(container: str, name: str) -> bool:
    """Whether the workspace of `container` has `name` (the test looks in; coderoom does not)."""
    look = ["docker", "exec", container, "test", "-f", f"/workspace/{name}"]
    return subprocess.run(look, capture_output=True, timeout=60).returncode == 0


def killed_mid_cell(runs: Path, cwd: Path, owners: list[int]) -> tuple[Path, int]:
    """A server killed (kill -9) while a cell runs that wrote kept.txt and output/a.txt first."""
    server = serve(runs, cwd)
    client, sid = start_client(server, "auto", "run_python", json.dumps({"code": CELL}))
    try:
        [run_dir] = runs.iterdir()
        wait_until(lambda: any(e["type"] == "tool_start" for e in events(run_dir)), "the cell")
        [container] = containers(server.process.pid)
        wait_until(lambda: written(container, "output/a.txt"), "the cell's first lines (its loop is what the kill finds)")
        owner = kill(server, owners)
    finally:
        client.kill()
        client.wait(30)
    assert read_record(run_dir).events[-1].type != "run_end"  # what the kill left: unfinished
    assert containers(owner), "the bound container outlives its owner"
    return run_dir, owner


def test_a_kill_mid_cell_is_recovered_by_the_restarted_server(sessions_tmp: Path, tmp_path: Path, owners: list[int]) -> None:
    runs = tmp_path / "runs"
    run_dir, owner = killed_mid_cell(runs, tmp_path, owners)
    said = restart_and_stop(runs, tmp_path)
    assert_recovered(run_dir, said)
    assert in_archive(run_dir)["kept.txt"] == b"before the kill"
    assert (run_dir / "output" / "a.txt").read_text() == "a" and "output/a.txt" in read_record(run_dir).events[-1].saved
    no_leftovers(sessions_tmp, owner)
    shown = subprocess.run([*COMMAND, "show", str(run_dir)], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert "recovered" in shown.stdout and "owner process ended" in " ".join(shown.stdout.split())


def test_a_kill_mid_cell_then_prune_recovers_it(sessions_tmp: Path, tmp_path: Path, owners: list[int]) -> None:
    runs = tmp_path / "runs"
    run_dir, owner = killed_mid_cell(runs, tmp_path, owners)
    said = prune()
    assert_recovered(run_dir, said)
    assert in_archive(run_dir)["kept.txt"] == b"before the kill"
    no_leftovers(sessions_tmp, owner)


def test_a_container_past_its_window_is_gone_and_named_lost(
    sessions_tmp: Path, tmp_path: Path, owners: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the host's window at 5 s, the container ends by itself once it has passed (the
    engine removes it); prune then names the workspace lost, saying why."""
    monkeypatch.setenv("CODEROOM_DOCKER_RECOVERY_S", "5")
    runs = tmp_path / "runs"
    run_dir, owner = killed_mid_cell(runs, tmp_path, owners)
    wait_until(lambda: not containers(owner), "the container's end at its window", within=60)
    said = prune()
    assert_lost(run_dir, said, "it is gone (its recovery window had passed")
    no_leftovers(sessions_tmp, owner)


def test_a_frozen_container_is_removed_by_prune_and_named_lost(sessions_tmp: Path, tmp_path: Path, owners: list[int]) -> None:
    """A container whose PID 1 cannot end it at its window (frozen by `docker pause`) is
    removed by prune all the same, its workspace named lost: it cannot be saved from."""
    runs = tmp_path / "runs"
    run_dir, owner = killed_mid_cell(runs, tmp_path, owners)
    [container] = containers(owner)
    subprocess.run(["docker", "pause", container], check=True, capture_output=True, timeout=60)
    said = prune()
    assert_lost(run_dir, said, "it is paused")
    no_leftovers(sessions_tmp, owner)


UNBOUND = """
import asyncio, sys, time
from coderoom.sandboxes import get_backend
from coderoom.sandboxes.spec import SandboxSpec

async def main():
    sandbox = await get_backend("docker").start(SandboxSpec(backend="docker"))
    print(sandbox.container_id, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_container_with_no_run_bound_ends_with_its_owner(sessions_tmp: Path, owners: list[int]) -> None:
    owner = subprocess.Popen([sys.executable, "-c", UNBOUND], stdout=subprocess.PIPE, text=True, env=server_env())
    owners.append(owner.pid)
    try:
        container = (owner.stdout.readline() if owner.stdout else "").strip()
        assert container and any(container.startswith(short) for short in containers(owner.pid))
    finally:
        owner.kill()
        owner.wait(30)
    wait_until(lambda: not containers(owner.pid), "the unbound container's end with its owner", within=30)


def test_a_kill_while_opening_leaves_no_session_unnamed(sessions_tmp: Path, tmp_path: Path, owners: list[int]) -> None:
    """Killed as soon as the run folder exists: either the session never opened (no
    session_open: nobody was given its id, nothing was written in it) or it is recovered."""
    runs = tmp_path / "runs"
    server = serve(runs, tmp_path)
    opening = subprocess.Popen([sys.executable, str(CLIENT), server.url, server.token, "auto"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=server_env())
    try:
        wait_until(lambda: runs.is_dir() and any(runs.iterdir()), "the run folder")
        owner = kill(server, owners)
    finally:
        opening.kill()
        opening.wait(30)
    [run_dir] = runs.iterdir()
    said = restart_and_stop(runs, tmp_path)
    kinds = [e.type for e in read_record(run_dir).events]
    if kinds[-1] == "run_end":
        assert_recovered(run_dir, said)
    else:
        assert "session_open" not in kinds and "recovered '" not in said and "lost '" not in said
    if containers(owner):  # a container made but never bound ends with its owner, by its contact deadline at worst
        wait_until(lambda: not containers(owner), "the unbound container's end", within=90)
    no_leftovers(sessions_tmp, owner)


def closing_a_big_workspace(server: HttpServer, runs: Path) -> tuple[subprocess.Popen[str], Path]:
    """A client whose session has 30 MB in its workspace and output/k.txt, once close_session's save has begun."""
    client, sid = start_client(server, "auto", "exec", json.dumps({"command": BIG}), "close_session", "{}")
    answered(client, "exec")
    [run_dir] = runs.iterdir()
    wait_until(lambda: (run_dir / "workspace.tar.partial").exists() or (run_dir / "workspace.tar").exists(), "the save")
    return client, run_dir


def test_a_kill_while_closing_is_recovered(sessions_tmp: Path, tmp_path: Path, owners: list[int]) -> None:
    """Killed while close_session saves: the workspace is saved whole (by the owner before the
    kill, or by the restart from the kept container), never a partial archive."""
    runs = tmp_path / "runs"
    server = serve(runs, tmp_path)
    client, run_dir = closing_a_big_workspace(server, runs)
    try:
        owner = kill(server, owners)
    finally:
        client.kill()
        client.wait(30)
    said = restart_and_stop(runs, tmp_path)
    end = read_record(run_dir).events[-1]
    assert end.type == "run_end"
    if end.status == "recovered":
        assert_recovered(run_dir, said) if "recovered '" in said else None
        assert end.cause == CAUSE and end.saved[:1] == ["workspace.tar"]
    else:  # the close had ended the record itself
        assert end.status == "ok" and "workspace.tar" in end.saved
    assert (run_dir / "workspace.tar").stat().st_size > 30_000_000 and (run_dir / "output" / "k.txt").is_file()
    assert not (run_dir / "workspace.tar.partial").exists()
    no_leftovers(sessions_tmp, owner)


def test_prune_recovers_the_workspace_of_a_killed_one_shot_run(sessions_tmp: Path, tmp_path: Path, owners: list[int]) -> None:
    run_dir = tmp_path / "run"
    steps = [call("exec_command", cmd="echo kept > made.txt"), call("exec_command", cmd="sleep 60"), say("never")]
    with OpenAIServer(steps) as model:
        run = start_run(model, run_dir, "docker", "hello")
        owners.append(run.process.pid)
        try:
            run.wait_for_event(tool_started("exec_command", "sleep 60"), "the sleep command")
        finally:
            run.process.send_signal(signal.SIGKILL)
            run.finish()
    assert read_record(run_dir).events[-1].type != "run_end"
    said = prune()
    assert_recovered(run_dir, said)
    assert in_archive(run_dir)["made.txt"] == b"kept\n"
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
