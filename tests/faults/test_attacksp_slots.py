"""Launcher speed changes attack pass (attacksp, 2026-12-07), pre-made slots and the early exit
report: S-P3..S-P6.

A command's init (pid 1 of its namespace) reports the exit once it has killed and reaped the
rest of the namespace, and the launcher keeps the next command's namespaces ready before it is
asked for. The payload should reach neither: not its init's slot socket or namespace handles,
not the ready slot, and nothing of a command may still write once its exit is reported."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from backends import require_backend
from sandbox.hostside import once_made

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


# what a command can get of its init, which holds the slot socket and reports its exit
REACH_INIT = r"""
import os, signal
print("fds", sorted(os.listdir("/proc/self/fd")))
for name in ("fd", "ns/mnt", "ns/pid", "environ", "root/", "mem"):
    try:
        os.listdir("/proc/1/" + name) if name.endswith(("fd", "/")) else open("/proc/1/" + name, "rb").read(1)
        print("reached", name)
    except OSError as exc:
        print("refused", name, exc.errno)
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGSTOP):
    os.kill(1, sig)  # same uid: delivered, but pid 1 ignores what it has no handler for
print("init alive", os.path.exists("/proc/1/cmdline"))
"""


async def test_s_p3_a_command_holds_no_slot_socket_and_cannot_reach_or_stop_its_init() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        looked = await session.exec("python3", "-c", REACH_INIT, shell=False)
        after = await session.exec("echo next")
    lines = looked.stdout.decode().splitlines()
    assert lines[0] == "fds ['0', '1', '2', '3']", lines  # stdio and the listing's own fd
    assert not [line for line in lines if line.startswith("reached")], lines
    assert "init alive True" in lines
    assert looked.exit_code == 0, looked.stderr
    assert (after.exit_code, after.stdout) == (0, b"next\n")


# processes that try to outlive their command's exit report, each writing a late file: a
# detached daemon, a stopped one, a child reparented to a subreaper, a thread whose leader
# exited, a sibling of the command (init's child), a parent waiting in vfork, a busy forker;
# the command exits at once
OUTLIVE = r"""
import ctypes, os, platform, signal, threading, time
def late(name, delay=1.0):
    time.sleep(delay)
    with open(name, "w") as f:
        f.write("late")
if os.fork() == 0:  # a daemon: double fork, new session
    os.setsid()
    if os.fork() == 0:
        late("late-daemon"); os._exit(0)
    os._exit(0)
if os.fork() == 0:  # stopped until someone continues it
    os.kill(os.getpid(), signal.SIGSTOP); late("late-stopped", 0); os._exit(0)
if os.fork() == 0:  # a subreaper whose grandchild waits
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    if os.fork() == 0:
        if os.fork() == 0:
            late("late-reaped"); os._exit(0)
        os._exit(0)
    time.sleep(5); os._exit(0)
if os.fork() == 0:  # a leader that exits alone: its thread writes
    threading.Thread(target=late, args=("late-thread",)).start()
    ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[platform.machine()], 0)
libc = ctypes.CDLL(None)
clone = {"x86_64": 56, "aarch64": 220}[platform.machine()]
if libc.syscall(clone, 0x8000 | signal.SIGUSR1, 0, 0, 0, 0) == 0:  # CLONE_PARENT: init's own child,
    late("late-sibling"); os._exit(0)  # asking for an exit signal other than SIGCHLD
if os.fork() == 0:  # a parent in vfork's wait (state D) on a child that never execs
    if libc.syscall(clone, 0x4000 | signal.SIGCHLD, 0, 0, 0, 0) == 0:  # CLONE_VFORK, own memory
        late("late-vfork"); os._exit(0)
    os._exit(0)
if os.fork() == 0:  # forks as fast as it can, each child writing later
    while True:
        try:
            if os.fork() == 0:
                late("late-forker"); os._exit(0)
        except OSError:
            pass
time.sleep(0.3)
print("leaving", flush=True)
"""


async def test_s_p4_nothing_of_a_command_writes_after_its_exit_is_reported() -> None:
    async with open_session(SandboxSpec(backend="local", limits=Limits(pids=64))) as session:
        workspace = session._inner.sandbox.workspace_dir
        for _ in range(3):
            result = await session.exec("python3", "-c", OUTLIVE, shell=False)
            assert result.stdout == b"leaving\n", result.stderr
            await asyncio.sleep(2.5)  # every late writer would have written by now
            assert sorted(p.name for p in workspace.glob("late-*")) == []
        after = await session.exec("echo next")
    assert (after.exit_code, after.stdout) == (0, b"next\n")


# lowers its oom_score_adj to 0 (the launcher's; the ready slot's init and stub stay at 1000) and
# takes all the session's memory it can, so the cgroup's OOM killer turns on the ready slot
HOG = r"""
import time
with open("/proc/self/oom_score_adj", "w") as f:
    f.write("0")
held = []
try:
    while True:
        held.append(bytearray(8 * 2**20))
except MemoryError:
    pass
print("holding", len(held), flush=True)
time.sleep(4)
"""


async def test_s_p5_a_command_that_starves_the_ready_slot_does_not_stop_later_commands() -> None:
    marker = uuid.uuid4().hex[:8]
    spec = SandboxSpec(backend="local", limits=Limits(memory="256M"))
    async with open_session(spec) as session:
        hog = asyncio.ensure_future(session.exec("python3", "-c", HOG, shell=False))
        await asyncio.sleep(2)
        during = await session.exec(f"echo {marker}")  # may fail (no memory), never run elsewhere
        await hog
        after = [await session.exec(f"echo {marker}") for _ in range(3)]
    assert during.exit_code != 0 or during.stdout == f"{marker}\n".encode()
    for result in after:
        assert (result.exit_code, result.stdout) == (0, f"{marker}\n".encode()), result.stderr


# System V objects under a fixed key, and a POSIX message queue, in one command's IPC namespace
IPC_MAKE = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
assert libc.msgget(0x5350, 0o1666) >= 0 and libc.semget(0x5350, 1, 0o1666) >= 0  # IPC_CREAT
assert libc.mq_open(b"/sp-queue", os.O_CREAT | os.O_RDWR, 0o666, None) >= 0
open("made", "w").close()
time.sleep(3)
"""
IPC_LOOK = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("msg", libc.msgget(0x5350, 0), "sem", libc.semget(0x5350, 1, 0), "mq", libc.mq_open(b"/sp-queue", os.O_RDWR))
print("listed", sum(len(open(f"/proc/sysvipc/{kind}").read().splitlines()) - 1 for kind in ("msg", "sem", "shm")))
"""


async def test_s_p10_no_ipc_object_of_a_running_command_reaches_the_slot_made_meanwhile() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        first = await once_made(session, IPC_MAKE, "made")
        assert not first.done(), first.result().stderr  # so it made them and holds them
        during = await session.exec("python3", "-c", IPC_LOOK, shell=False)
        assert not first.done()
        assert (await first).exit_code == 0
        after = await session.exec("python3", "-c", IPC_LOOK, shell=False)
    for looked in (during, after):
        assert looked.stdout.decode().split() == ["msg", "-1", "sem", "-1", "mq", "-1", "listed", "0"], looked.stderr
