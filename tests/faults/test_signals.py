"""SIGINT, SIGTERM and SIGHUP stop `coderoom run` at any stage the same way: exit 128+N, the
record ends with run_end "interrupted" naming the signal, what the agent wrote so far is saved,
and nothing of the sandbox is left (session folder, processes, container)."""

from __future__ import annotations

import signal
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from .harness import Run, no_leftovers, start_run, tool_started
from sandbox.hostside import host_processes_with
from openai_server import OpenAIServer, Stall, call, say

WRITE_NOTE = "mkdir -p output && echo '# partial' > output/note.md"
PTY_MARKER = f"cr-fault-pty-{uuid.uuid4().hex[:8]}"  # this run's, not another one's
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


def _stage_script(stage: str) -> list:
    first = call("exec_command", cmd=WRITE_NOTE)
    if stage == "command":
        return [first, call("exec_command", cmd="sleep 60"), say("never")]
    if stage == "kernel cell":
        return [first, call("run_python", code="import time; time.sleep(60)"), say("never")]
    if stage == "pty session":  # a command still running as a session while the model thinks
        return [first, call("exec_command", cmd=f"sleep 60; : {PTY_MARKER}", yield_time_ms=300), Stall(60)]
    if stage == "model request":
        return [first, Stall(60)]
    return [Stall(60)]  # sandbox start: the signal comes as it starts, or in the first request


def _reach(stage: str, run: Run, server: OpenAIServer) -> None:
    if stage == "sandbox start":
        run.wait_for_event(lambda e: e["type"] == "run_start", "run_start")
        return  # at once: the session is starting
    elif stage == "command":
        run.wait_for_event(tool_started("exec_command", "sleep 60"), "the sleep command")
    elif stage == "kernel cell":
        run.wait_for_event(tool_started("run_python"), "the kernel cell")
    elif stage == "pty session":
        run.wait_for(lambda: len(server.requests) >= 3 and bool(host_processes_with(PTY_MARKER)), "the live session")
    else:
        run.wait_for(lambda: len(server.requests) >= 2, "the second model request")
    time.sleep(0.3)  # into the stage, not at its edge
    run.note_resources()


STAGES = ["sandbox start", "command", "kernel cell", "pty session", "model request"]
CASES = [(stage, signal.SIGTERM) for stage in STAGES] + [
    ("command", signal.SIGINT),
    ("model request", signal.SIGHUP),
]


@pytest.mark.parametrize(("stage", "signum"), CASES, ids=[f"{s}-{g.name}" for s, g in CASES])
def test_a_signal_at_any_stage_saves_records_and_cleans_up(
    backend: str, stage: str, signum: signal.Signals, tmp_path: Path
) -> None:
    with OpenAIServer(_stage_script(stage)) as server:
        run = start_run(server, tmp_path / "run", backend, "--output", "output/note.md", "write a note")
        _reach(stage, run, server)
        sent = time.monotonic()
        run.process.send_signal(signum)
        run.finish()
        took = time.monotonic() - sent
    assert run.process.returncode == EXIT[signum], run.stderr
    assert f"interrupted by {signum.name}" in run.stderr
    end = run.last_event()
    assert end["type"] == "run_end" and end["status"] == "interrupted" and end["signal"] == signum.name
    if stage == "sandbox start" and not end["saved"]:  # the signal beat the session's start
        assert end["incomplete"] == "interrupted before the sandbox had started: nothing to save"
    else:
        assert end["incomplete"] is None and "workspace.tar" in end["saved"]
        with tarfile.open(run.run_dir / "workspace.tar") as tar:
            tar.getmembers()  # whole, not truncated
    if stage != "sandbox start":  # the first command wrote the note
        assert (run.run_dir / "output/note.md").read_text() == "# partial\n"
    assert not list(run.run_dir.glob("*.partial")) and not list(run.run_dir.glob(".*partial"))
    assert took < 20, f"{took:.1f} s from {signum.name} to exit"
    no_leftovers(run)
    assert not host_processes_with(PTY_MARKER), "a PTY session outlived the run"


def test_a_second_signal_never_leaves_a_truncated_archive(backend: str, tmp_path: Path) -> None:
    """The second SIGTERM lands while the workspace (200 MB) is being saved: the run folder then
    holds a whole workspace.tar or none, and run_end says which."""
    big = "mkdir -p output && echo '# note' > output/note.md && head -c 200000000 /dev/zero > big.bin"
    steps = [call("exec_command", cmd=big), call("exec_command", cmd="sleep 60"), say("never")]
    with OpenAIServer(steps) as server:
        run = start_run(server, tmp_path / "run", backend, "--output", "output/note.md", "write")
        run.wait_for_event(tool_started("exec_command", "sleep 60"), "the sleep command")
        run.process.send_signal(signal.SIGTERM)
        time.sleep(0.4)
        run.process.send_signal(signal.SIGTERM)
        run.finish()
    assert run.process.returncode == 143, run.stderr
    end = run.last_event()
    assert end["type"] == "run_end" and end["status"] == "interrupted"
    archive = run.run_dir / "workspace.tar"
    if end["incomplete"] is None:
        with tarfile.open(archive) as tar:
            assert tar.getmember("big.bin").size == 200_000_000
    else:
        assert not archive.exists() or "workspace.tar" in end["saved"]
    assert not list(run.run_dir.glob("*.partial")) and not list(run.run_dir.glob(".*partial"))
    no_leftovers(run)
