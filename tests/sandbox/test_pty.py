"""PTY sessions on every backend, through the SDK's own shell tools (what the model calls): a
command that outlives `yield_time_ms` keeps running as a session polled with `write_stdin`,
tty=true gives a real terminal, and every limit holds for such a process as for one command.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents.sandbox.capabilities.tools.shell_tool import (
    ExecCommandArgs,
    ExecCommandTool,
    WriteStdinArgs,
    WriteStdinTool,
)
from agents.sandbox.errors import PtySessionNotFoundError

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.live import MAX_LIVE_PROCESSES
from coderoom.sandboxes.session import open_session
from .hostside import host_processes_with

_SESSION = re.compile(r"Process running with session ID (\d+)")
_EXITED = re.compile(r"Process exited with code (\d+)")


class Shell:
    """The SDK's exec_command and write_stdin tools over one session, as the model uses them."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._exec = ExecCommandTool(session=session)
        self._write = WriteStdinTool(session=session)

    async def exec(self, cmd: str, **args: Any) -> str:
        return await self._exec.run(ExecCommandArgs(cmd=cmd, **args))

    async def write(self, session_id: int, chars: str = "", **args: Any) -> str:
        return await self._write.run(WriteStdinArgs(session_id=session_id, chars=chars, **args))


def session_id(reply: str) -> int:
    match = _SESSION.search(reply)
    assert match, f"no session id in {reply!r}"
    return int(match.group(1))


def exit_code(reply: str) -> int | None:
    match = _EXITED.search(reply)
    return int(match.group(1)) if match else None


def output(reply: str) -> str:
    return reply.split("Output:\n", 1)[1]


@pytest.fixture
async def shell(backend: str) -> AsyncIterator[Shell]:
    async with open_session(SandboxSpec(backend=backend, limits=Limits(timeout=60))) as session:
        yield Shell(session)


def gone(marker: str, seconds: float = 15.0) -> bool:
    """Whether no host process names `marker` (a sandbox's processes are host processes too)."""
    deadline = time.monotonic() + seconds
    while host_processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


async def test_the_shell_tools_offer_write_stdin(shell: Shell) -> None:
    assert shell.session.supports_pty()


async def test_a_command_past_its_yield_time_becomes_a_session_polled_to_its_end(shell: Shell) -> None:
    """The model's own `yield_time_ms` (1 s here; the SDK's default is 10 s) is what the command
    outlives: four times over, so it is still running when the call returns, whatever the default."""
    started = time.monotonic()
    first = await shell.exec("echo started; sleep 4; echo finished", yield_time_ms=1000)
    assert exit_code(first) is None and output(first) == "started\n"
    sid = session_id(first)
    last = await shell.write(sid, yield_time_ms=30_000)  # an empty poll waits for the end
    assert exit_code(last) == 0 and output(last) == "finished\n"
    assert 4 <= time.monotonic() - started < 14  # it ran on, not killed at yield_time_ms
    assert "write_stdin failed" in await shell.write(sid)  # reported once, then gone


async def test_a_tty_program_prompts_and_reads_a_line(shell: Shell) -> None:
    program = "python3 -c \"import sys; print(sys.stdin.isatty()); print('hello', input('name? '))\""
    first = await shell.exec(program, tty=True, yield_time_ms=3000)
    assert output(first) == "True\r\nname? "
    last = await shell.write(session_id(first), "Ada\n", yield_time_ms=3000)
    assert exit_code(last) == 0 and output(last) == "Ada\r\nhello Ada\r\n"  # echoed by the terminal


async def test_ctrl_c_interrupts_a_tty_session(shell: Shell) -> None:
    first = await shell.exec("sleep 1000", tty=True, yield_time_ms=500)
    last = await shell.write(session_id(first), "\u0003", yield_time_ms=3000)
    assert exit_code(last) == 130  # SIGINT from the terminal's line discipline


async def test_input_needs_a_terminal(shell: Shell) -> None:
    first = await shell.exec("sleep 1000", yield_time_ms=250)
    reply = await shell.write(session_id(first), "x")
    assert "stdin is not available for this process" in reply  # the SDK's own answer
    with pytest.raises(RuntimeError):
        await shell.session.pty_write_stdin(session_id=session_id(first), chars="x")


async def test_the_terminal_is_the_sandboxs_own_and_tiocsti_is_refused(shell: Shell) -> None:
    probe = (
        "import fcntl, os, sys, termios\n"
        "print(os.ttyname(0), os.getsid(0) == os.getpid())\n"
        "try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('TIOCSTI allowed')\n"
        "except OSError as e:\n    print('TIOCSTI', e.errno)\n"
        "print(sorted(n for _, n in __import__('socket').if_nameindex()))\n"
    )
    await shell.session.exec(f"cat > probe.py <<'EOF'\n{probe}EOF")
    reply = await shell.exec("exec python3 probe.py", tty=True, yield_time_ms=5000)
    lines = output(reply).splitlines()
    assert exit_code(reply) == 0, reply
    assert lines[0].startswith("/dev/pts/") and lines[0].endswith(" True")  # its own session's tty
    assert lines[1] == "TIOCSTI 1"  # EPERM: the seccomp filter, on a terminal too
    assert lines[2] == "['lo']"  # no network, as for every command


async def test_a_session_cannot_reach_another_sessions_terminal(shell: Shell) -> None:
    if shell.session._inner.__class__.__name__ != "LocalSandboxSession":
        pytest.skip("docker: one devpts per container, as for `docker exec -t`")
    holder = await shell.exec("sleep 1000", tty=True, yield_time_ms=250)
    assert session_id(holder)
    reply = await shell.exec("ls /dev/pts", tty=True, yield_time_ms=3000)
    assert output(reply).split() == ["0", "ptmx"]  # a devpts instance per command


async def test_a_session_is_killed_at_the_wall_clock_and_told_so(backend: str) -> None:
    marker = f"cr-pty-{uuid.uuid4().hex[:8]}"
    async with open_session(SandboxSpec(backend=backend, limits=Limits(timeout=3))) as session:
        shell = Shell(session)
        first = await shell.exec(f"sh -c 'sleep 1000; : {marker}' & sleep 1000", tty=True, yield_time_ms=500)
        sid = session_id(first)
        assert host_processes_with(marker)
        await asyncio.sleep(4)
        assert gone(marker, 5), "a live process outlived the wall clock"
        last = await shell.write(sid)  # the model's next poll says what happened
        assert exit_code(last) == 124
        assert "[coderoom: killed after the 3 s wall-clock limit]" in output(last)
        assert "the 3 s wall-clock limit" in session._inner.limits_hit


async def test_a_flood_stays_within_output_bytes(backend: str) -> None:
    async with open_session(SandboxSpec(backend=backend, limits=Limits(output_bytes="4K"))) as session:
        shell = Shell(session)
        for tty in (False, True):
            first = await shell.exec("yes flood", tty=tty, yield_time_ms=500)  # far past 4K within it
            sid = session_id(first)
            later = await shell.write(sid, yield_time_ms=5000)
            for reply in (first, later):
                assert len(output(reply).encode()) < 4096 + 100
                assert "bytes of output dropped" in output(reply)
            await session.pty_terminate_all()


async def test_live_processes_are_capped_and_the_oldest_idle_ones_end(shell: Shell) -> None:
    marker = f"cr-pty-{uuid.uuid4().hex[:8]}"
    ids = []
    for _ in range(MAX_LIVE_PROCESSES + 4):
        ids.append(session_id(await shell.exec(f"sleep 1000; : {marker}", yield_time_ms=250)))
        assert len(host_processes_with(marker)) <= MAX_LIVE_PROCESSES
    assert len(host_processes_with(marker)) == MAX_LIVE_PROCESSES
    with pytest.raises(PtySessionNotFoundError):  # the first ones made room (the SDK's rule)
        await shell.session.pty_write_stdin(session_id=ids[0], chars="")
    assert exit_code(await shell.write(ids[-1])) is None  # the most recent one runs on


async def test_terminate_all_and_close_leave_no_process(backend: str) -> None:
    marker = f"cr-pty-{uuid.uuid4().hex[:8]}"
    orphan = f"(setsid sh -c 'sleep 1000; : {marker}' &); exec sh -c 'sleep 1000; : {marker}'"
    async with open_session(SandboxSpec(backend=backend)) as session:
        inner = session._inner
        shell = Shell(session)
        sid = session_id(await shell.exec(orphan, tty=True, yield_time_ms=500))
        assert len(host_processes_with(marker)) >= 2
        await session.pty_terminate_all()
        assert gone(marker), "a process outlived pty_terminate_all"
        assert "write_stdin failed" in await shell.write(sid)
        await shell.exec(orphan, yield_time_ms=500)
        await shell.exec(orphan, tty=True, yield_time_ms=500)
        assert host_processes_with(marker)
    assert gone(marker), "a process outlived the session"
    assert not leftovers(inner), "the session left its folder or container"


def leftovers(inner: Any) -> bool:
    """Whether what `coderoom sandbox prune` would remove of this session is still there."""
    if hasattr(inner, "host_dir"):  # local: the session folder
        return bool(inner.host_dir.exists())
    from coderoom.sandboxes.docker.image import docker_client

    try:
        docker_client().containers.get(inner.state.container_id)
    except Exception as exc:  # docker.errors.NotFound
        return type(exc).__name__ != "NotFound"
    return True
