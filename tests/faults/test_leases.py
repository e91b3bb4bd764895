"""A SIGKILLed coderoom leaves no running sandbox for good: a Docker container stops by itself,
and `coderoom sandbox prune` reclaims what is left, on both backends, never touching the
resources of a run that is still alive."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from .harness import COMMAND, clean_env, containers, events, no_leftovers, start_run, tool_started
from openai_server import OpenAIServer, Stall, call, say


def _prune() -> str:
    done = subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_prune_reclaims_a_killed_run_and_spares_a_live_one(backend: str, tmp_path: Path) -> None:
    steps = [call("exec_command", cmd="sleep 60"), say("never")]
    # the live run then waits on its model: exec_command yields after 10 s, and under load the
    # kill and the prune can take longer than that, which would let it end by itself
    live_steps = [call("exec_command", cmd="sleep 60"), Stall(300)]
    with OpenAIServer(steps) as killed_server, OpenAIServer(live_steps) as live_server:
        killed = start_run(killed_server, tmp_path / "killed", backend, "work")
        live = start_run(live_server, tmp_path / "live", backend, "work")
        for run in (killed, live):
            run.wait_for_event(tool_started("exec_command", "sleep 60"), "the sleep command")
        assert killed.seen_folders or killed.seen_containers, "the probe must see the sandbox"
        killed.process.send_signal(signal.SIGKILL)
        killed.finish()
        _prune()
        no_leftovers(killed)
        live.note_resources()
        assert {f for f in live.seen_folders if f.exists()} == live.seen_folders, "prune took a live run's folder"
        if backend == "docker":
            assert containers(live.process.pid) == live.seen_containers, "prune took a live run's container"
        live.process.send_signal(signal.SIGTERM)
        live.finish()
    assert live.process.returncode == 143, live.stderr
    no_leftovers(live)


def test_a_kill_before_the_first_command_keeps_its_container_for_recovery_and_prune_takes_it(tmp_path: Path) -> None:
    """Killed while the container is up but no command was sent (the first model request
    stalls): the run was bound to it, so the container waits out the recovery window instead of
    going with its owner (docs/reliability.md), and `prune` saves the workspace into the run
    folder and removes the container."""
    from backends import require_backend

    require_backend("docker")
    with OpenAIServer([Stall(60)]) as server:
        run = start_run(server, tmp_path / "run", "docker", "work")
        run.wait_for(lambda: len(server.requests) >= 1, "the first model request")
        assert run.seen_containers, "the probe must see the container"
        run.process.send_signal(signal.SIGKILL)
        run.finish()
    assert containers(run.process.pid) == run.seen_containers, "a bound run's container is kept for recovery"
    said = _prune()
    assert f"into '{tmp_path / 'run'}" in said and "recovered" in said, said
    (end,) = [event for event in events(tmp_path / "run") if event["type"] == "run_end"]
    assert end["status"] == "recovered", end
    no_leftovers(run)


def test_prune_spares_a_live_run_in_another_pid_namespace(backend: str, tmp_path: Path) -> None:
    """A coderoom in another PID namespace (a container, `unshare -p`) names itself by a pid
    that means nothing here: prune must not take its resources for a dead run's (attack B05)."""
    run = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", *COMMAND, "sandbox", "run", "--sandbox", backend,
         "--timeout", "60", "--", "sh", "-c", "sleep 8; echo finished-normally"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    try:
        time.sleep(4)  # the sandbox runs its sleep now
        assert run.poll() is None, run.communicate()
        _prune()
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, err
    assert "finished-normally" in out
