"""Local backend: processes that outlive one command (what run_python's kernel needs), and that
they never outlive the session, its limits or the host process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from agents.sandbox.errors import PtySessionNotFoundError
from backends import require_backend

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session
from .hostside import host_processes_with


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")




def wait_until(condition, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def test_a_process_serves_later_commands_through_a_fifo_and_dies_with_the_session() -> None:
    marker = f"cr-longlived-{uuid.uuid4().hex[:8]}"
    server = (
        'mkfifo q && echo ready && while :; do read line < q || continue; echo "served $line" > answer; done'
    )
    async with open_session(SandboxSpec(backend="local")) as session:
        started = await session.pty_exec_start("sh", "-c", server, marker, shell=False, yield_time_s=0.5)
        assert started.exit_code is None and started.process_id is not None
        assert started.output == b"ready\n"
        first = await session.exec("echo one > q; sleep 0.2; cat answer")
        second = await session.exec("echo two > q; sleep 0.2; cat answer")
        assert (first.stdout, second.stdout) == (b"served one\n", b"served two\n")
        archive = await asyncio.wait_for(session.persist_workspace(), 5)  # not held up by it
        archive.close()
        assert host_processes_with(marker)
    assert wait_until(lambda: not host_processes_with(marker)), "the process survived the session"


async def test_terminate_all_kills_the_whole_pid_namespace() -> None:
    marker = f"cr-longlived-{uuid.uuid4().hex[:8]}"
    daemon = f"(setsid sh -c 'sleep 1000; : {marker}-child' &); exec sh -c 'sleep 1000; : {marker}-main'"
    async with open_session(SandboxSpec(backend="local")) as session:
        started = await session.pty_exec_start("sh", "-c", daemon, marker, shell=False, yield_time_s=0.3)
        assert wait_until(lambda: len(host_processes_with(marker)) >= 2)
        await session.pty_terminate_all()
        assert wait_until(lambda: not host_processes_with(marker)), "an orphan outlived the kill"
        with pytest.raises(PtySessionNotFoundError):
            await session.pty_write_stdin(session_id=started.process_id or 0, chars="")


async def test_exit_code_stdin_and_bounded_output() -> None:
    async with open_session(SandboxSpec(backend="local", limits=Limits(output_bytes="4K"))) as session:
        done = await session.pty_exec_start("sh -c 'echo bye; exit 3'", yield_time_s=2)
        assert (done.process_id, done.exit_code, done.output) == (None, 3, b"bye\n")
        echo = await session.pty_exec_start("stty -echo; cat", tty=True, yield_time_s=0.3)
        assert echo.process_id is not None
        reply = await session.pty_write_stdin(session_id=echo.process_id, chars="hi\n", yield_time_s=0.5)
        assert reply.output == b"hi\r\n"  # the terminal's line discipline: CR LF
        flooder = "head -c 1000000 /dev/zero | tr '\\0' a; sleep 1000"
        flood = await session.pty_exec_start(flooder, yield_time_s=1)
        assert flood.process_id is not None
        later = await session.pty_write_stdin(session_id=flood.process_id, chars="", yield_time_s=0.3)
        assert b"bytes of output dropped" in flood.output + later.output
        assert len(flood.output) + len(later.output) < 10_000 + 200
        with pytest.raises(RuntimeError, match="stdin is not available"):  # no terminal: no input
            await session.pty_write_stdin(session_id=flood.process_id, chars="x")


async def test_the_workspace_limit_stops_a_long_lived_writer() -> None:
    limits = Limits(workspace_size="2M", file_size="64M")
    async with open_session(SandboxSpec(backend="local", limits=limits)) as session:
        writer = "echo go; sleep 0.3; for f in a b c; do head -c 1500000 /dev/zero > $f; done; sleep 1000"
        started = await session.pty_exec_start(writer, yield_time_s=0.25)
        assert started.process_id is not None
        update = await session.pty_write_stdin(session_id=started.process_id, chars="", yield_time_s=6)
        assert update.exit_code is not None, "still running over the workspace limit"
        assert b"workspace is" in update.output and b"limit" in update.output


def test_a_long_lived_process_dies_with_its_host(harness_tmpdir: Path) -> None:
    """SIGKILL the host process: --die-with-parent takes the sandbox down, nothing is left."""
    marker = f"cr-longlived-{uuid.uuid4().hex[:8]}"
    script = (
        "import asyncio, sys\nfrom coderoom.sandboxes import SandboxSpec\nfrom coderoom.sandboxes.session import open_session\n"
        "async def main():\n"
        "    async with open_session(SandboxSpec(backend='local')) as s:\n"
        f"        await s.pty_exec_start('sh', '-c', 'sleep 1000', '{marker}', shell=False,\n"
        "                               yield_time_s=0.3)\n"
        "        print('up', flush=True)\n"
        "        await asyncio.sleep(1000)\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "TMPDIR": str(harness_tmpdir)}
    host = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert host.stdout is not None and host.stdout.readline() == "up\n"
        assert host_processes_with(marker)
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait()
    assert wait_until(lambda: not host_processes_with(marker)), "the sandbox outlived its host"


async def test_host_walks_survive_a_tree_changing_under_them() -> None:
    """The archiver and the workspace watchdog walk the workspace while sandbox processes change
    it: entries that vanish or turn into links mid-walk are skipped, never an error or followed."""
    churn = (
        "import os, shutil\n"
        "while True:\n"
        "    for i in range(20):\n"
        "        os.makedirs(f'd{i}/a/b', exist_ok=True); open(f'd{i}/a/f', 'w').close()\n"
        "    for i in range(20):\n"
        "        shutil.rmtree(f'd{i}'); os.symlink('/etc', f'd{i}')\n"
        "    for i in range(20):\n"
        "        os.unlink(f'd{i}')\n"
    )
    async with open_session(SandboxSpec(backend="local")) as session:
        await session.pty_exec_start("python3", "-c", churn, shell=False, yield_time_s=0.25)
        for _ in range(40):
            archive = await session.persist_workspace()
            archive.close()
        result = await session.exec("sleep 1; echo survived")  # the watchdog walks meanwhile
        assert result.stdout == b"survived\n", result.stderr


async def test_a_fast_long_lived_file_creator_is_stopped_close_to_the_entry_cap() -> None:
    """Issue 10 class 7: the kernel's watchdog used to let this reach 6x the cap (benchmarks/limits_bench.py)."""
    from coderoom.hostile import tree

    creator = "i = 0\nwhile True:\n    open(f'f{i}', 'w').close()\n    i += 1\n"
    async with open_session(SandboxSpec(backend="local")) as session:
        started = await session.pty_exec_start("python3", "-c", creator, shell=False, yield_time_s=0.1)
        assert started.process_id is not None
        update = started
        deadline = time.monotonic() + 90
        while update.exit_code is None and time.monotonic() < deadline:
            update = await session.pty_write_stdin(session_id=started.process_id, chars="", yield_time_s=1)
        entries = sum(1 for _ in tree.walk(session._inner.sandbox.workspace_dir))
    assert update.exit_code is not None and b"more than 100000 entries" in update.output
    assert entries <= 1.5 * tree.MAX_ENTRIES
