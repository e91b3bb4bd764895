"""A long-lived server stopped with live sessions and a warm pool leaves nothing behind: on
SIGTERM or SIGINT every session is saved as a run folder ending "interrupted" and every sandbox
(the sessions' and the pool's) is closed; after SIGKILL, `coderoom sandbox prune` reclaims them."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from coderoom.record import read_record
from mcp_process import start_http

from .harness import COMMAND, Run, clean_env, no_leftovers

EXIT = {signal.SIGTERM: 143, signal.SIGINT: 130}
# The pool refills as soon as a sandbox is claimed, so a SIGKILL may land while the Docker daemon
# is still creating a container for it; the daemon finishes that request after its client died.
# prune reclaims such a container once it exists, so it runs after the daemon has settled. A local
# sandbox has no daemon: nothing of it is made after its server's process is gone.
DAEMON_SETTLE_S = 3.0


async def _live_session(run: Run, server, sandboxes: int) -> str:
    """Open a session with state in its kernel; wait until `sandboxes` are up (session + pool)."""
    async with server.client() as client:
        opened = await client.call_tool("open_session", {"uploads": {"input/x.txt": "aGk="}})
        sid = opened.content[0].text.split()[1]
        await client.call_tool("run_python", {"session_id": sid, "code": "kept = 1"})

    def all_up() -> bool:
        run.note_resources()
        return len(run.seen_folders | run.seen_containers) >= sandboxes

    run.wait_for(all_up, f"{sandboxes} sandboxes")
    return sid


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stopped_server_saves_its_sessions_and_closes_its_pool(backend: str, signum: signal.Signals, tmp_path: Path) -> None:
    server = start_http("--sandbox", backend, "--pool", "1", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    run = Run(server.process, Path(), backend)
    await _live_session(run, server, sandboxes=2)
    server.process.send_signal(signum)
    assert server.process.wait(90) == EXIT[signum]
    no_leftovers(run)
    [run_dir] = (tmp_path / "runs").iterdir()
    end = read_record(run_dir).events[-1]
    assert (end.type, end.status, end.signal) == ("run_end", "interrupted", signum.name)
    assert "workspace.tar" in end.saved


async def test_a_killed_server_leaves_what_prune_reclaims(backend: str, tmp_path: Path) -> None:
    server = start_http("--sandbox", backend, "--pool", "1", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    run = Run(server.process, Path(), backend)
    await _live_session(run, server, sandboxes=2)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait(30)
    if backend == "docker":
        time.sleep(DAEMON_SETTLE_S)
    done = subprocess.run([*COMMAND, "sandbox", "prune"], capture_output=True, text=True, env=clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    no_leftovers(run)
