"""Local backend: the launcher's pre-made command sandboxes (slots). A slot is made before its
command is asked for, often while the previous command still runs, and is used exactly once:
no command sees what another left in /tmp, /dev/shm, its processes or its mounts; a command's
exit is reported only once nothing of it runs; a slot that dies unused, and every slot when the
session closes, leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session

from .hostside import host_processes_with, until


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


def inner(session):  # type: ignore[no-untyped-def]
    return session._inner.sandbox  # the LocalSandbox under the SDK adapter


def leave_behind(marker: str) -> str:
    """A command that leaves a file in /tmp and /dev/shm and a process carrying `marker`, and
    prints the devices of its /tmp and /dev/shm (a tmpfs each)."""
    return (
        f"echo left > /tmp/{marker}; echo left > /dev/shm/{marker}; "
        f"(setsid sh -c 'sleep 30; : {marker}' > /dev/null 2>&1 &); "
        "stat -c %d /tmp /dev/shm"
    )


def look_for(marker: str) -> str:
    """A command that prints what it can see of `leave_behind(marker)`'s leftovers, then its own
    /tmp and /dev/shm devices."""
    pattern = f"{marker[:-1]}[{marker[-1]}]"  # a glob and a regex not matching this command's own line
    return (
        f"ls /tmp/{pattern} /dev/shm/{pattern} 2>/dev/null; "
        f"cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c '{pattern}'; "
        "stat -c %d /tmp /dev/shm"
    )


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def state(pid: int) -> str:
    """A process's state letter (Z: a zombie), or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


async def launcher_pid(session) -> int:  # type: ignore[no-untyped-def]
    """The launcher's host pid: the only child of the sandbox's pid 1."""
    sandbox_pid = await inner(session)._launcher.sandbox_pid()
    (pid,) = children(sandbox_pid)
    return pid


def pid_namespace(pid: int) -> str:
    """A process's PID namespace, or "" once it is gone (or a zombie)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def slots_and_preparers(launcher: int) -> tuple[list[int], list[int]]:
    """The launcher's children: its slots' inits (each pid 1 of a PID namespace of its own) and
    its preparers (in the launcher's own PID namespace)."""
    kids = children(launcher)
    ours = pid_namespace(launcher)
    return [pid for pid in kids if pid_namespace(pid) != ours], [pid for pid in kids if pid_namespace(pid) == ours]


async def ready_slot(session) -> int:  # type: ignore[no-untyped-def]
    """The host pid of the launcher's ready slot (its init), once nothing else is running."""
    launcher = await launcher_pid(session)
    for _ in range(100):
        slots, _ = slots_and_preparers(launcher)
        alive = [pid for pid in slots if state(pid) not in ("", "Z")]
        if len(alive) == 1 and len(slots) == 1:
            return alive[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"the launcher has no single ready slot: {children(launcher)}")


async def test_a_command_s_exit_is_reported_only_once_nothing_of_it_runs() -> None:
    marker = f"cr-left-{uuid.uuid4().hex[:8]}"
    async with open_session(SandboxSpec(backend="local")) as session:
        for _ in range(5):
            left = await session.exec(leave_behind(marker))
            assert left.exit_code == 0
            assert not host_processes_with(marker)  # killed before the report, not after


async def test_the_next_command_sees_nothing_the_previous_one_left() -> None:
    marker = f"cr-left-{uuid.uuid4().hex[:8]}"
    async with open_session(SandboxSpec(backend="local")) as session:
        left = await session.exec(leave_behind(marker))
        looked = await session.exec(look_for(marker))
    assert left.exit_code == 0
    assert looked.stdout.split()[0] == b"0"  # no file listed, no process to see


async def test_a_slot_made_while_a_command_runs_is_not_that_command_s() -> None:
    """The launcher makes the next slot while a command runs; a command started in it meanwhile
    sees none of the running command's files, processes or mounts, nor does the one after."""
    marker = f"cr-left-{uuid.uuid4().hex[:8]}"
    async with open_session(SandboxSpec(backend="local")) as session:
        ready = inner(session).workspace_dir / marker
        first = asyncio.ensure_future(session.exec(leave_behind(marker) + f"; touch {marker}; sleep 2"))
        assert await until(ready.exists, 4)
        during = await session.exec(look_for(marker))
        assert not first.done()  # so `during`'s slot was made before `first` ended
        left = await first
        after = await session.exec(look_for(marker))
    assert left.exit_code == 0
    for looked in (during, after):
        assert looked.stdout.split()[0] == b"0"  # no file listed, no process to see
    # mounted at the same time, so other devices mean other mounts (once one is gone, the kernel
    # may give its device number to the next)
    assert set(left.stdout.split()).isdisjoint(during.stdout.split()[1:])
    assert not host_processes_with(marker)


async def test_a_ready_slot_that_dies_is_replaced_and_leaves_nothing() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        assert (await session.exec("true")).exit_code == 0
        launcher = await launcher_pid(session)
        dead = await ready_slot(session)
        os.kill(dead, signal.SIGKILL)  # as an OOM kill might
        assert await until(lambda: state(dead) == "")  # reaped at once, not left a zombie until the next command
        assert await ready_slot(session) != dead
        again = await session.exec("echo still here")
        assert (again.exit_code, again.stdout) == (0, b"still here\n")
        assert state(launcher) not in ("", "Z")


async def test_the_ready_slot_goes_with_the_session() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        assert (await session.exec("true")).exit_code == 0
        ready = await ready_slot(session)
    assert state(ready) == ""


def open_fds(pid: int) -> list[str]:
    return [os.readlink(f"/proc/{pid}/fd/{name}") for name in os.listdir(f"/proc/{pid}/fd")]


async def test_slots_are_made_by_a_preparer_holding_nothing_but_its_socket_to_the_launcher() -> None:
    """The next slot is cloned by the launcher's preparer, so the launcher is free when a
    command's exit comes in; each init is still the launcher's child (CLONE_PARENT), and the
    preparer, a copy of the launcher as deep under bwrap as an init, holds no slot, pidfd or
    mount namespace of the launcher's, and counts as none of the session's payload processes."""
    from coderoom.sandboxes.local.disk import LAUNCHER_DEPTH, session_pids

    async with open_session(SandboxSpec(backend="local")) as session:
        for _ in range(3):
            assert (await session.exec("true")).exit_code == 0
        launcher = await launcher_pid(session)
        ready = await ready_slot(session)
        slots, preparers = slots_and_preparers(launcher)
        (preparer,) = preparers
        held = open_fds(preparer)
        payload = session_pids(inner(session)._launcher.pid, below=LAUNCHER_DEPTH)
    assert slots == [ready]
    assert [fd for fd in held if fd.startswith("socket:")] == held[-1:]  # one socket, no other
    assert not [fd for fd in held if fd.startswith(("mnt:", "anon_inode:[pidfd]"))]
    assert preparer not in payload and ready not in payload


async def test_a_preparer_that_dies_takes_its_launcher_down_and_the_next_command_starts_another() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        assert (await session.exec("true")).exit_code == 0
        launcher = await launcher_pid(session)
        (preparer,) = slots_and_preparers(launcher)[1]
        os.kill(preparer, signal.SIGKILL)
        for _ in range(250):
            if state(launcher) == "":
                break
            await asyncio.sleep(0.02)
        assert state(launcher) == ""
        again = await session.exec("echo still here")
        assert (again.exit_code, again.stdout) == (0, b"still here\n")
        assert await launcher_pid(session) != launcher
