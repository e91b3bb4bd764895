"""Gate and presence pass (2026-12-06), the local start on cgroup v1: bwrap born in the session's
memory cgroup by the process's spawner thread (`cgroup.MemoryCgroup.spawn_inside`). Sessions
started at once from one process each land in their own cgroup, no thread of the host stays in
one, and the limit OOM-kills inside the session, across processes."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.local import LocalBackend
from coderoom.sandboxes.local.spawner import spawner
from coderoom.sandboxes.local.cgroup import Mode, detect
from coderoom.sandboxes.spec import SandboxSpec

SESSIONS = 4
MEMORY = "256M"


def memory_cgroup(pid: int, tid: int | None = None) -> str:
    where = f"/proc/{pid}/task/{tid}/cgroup" if tid is not None else f"/proc/{pid}/cgroup"
    for line in Path(where).read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    raise AssertionError(f"no memory line in {where}")


def threads_outside(host: str) -> dict[str, str]:
    """This process's threads whose memory cgroup is not `host` (name and tid: their cgroup).
    In a full run the process has threads of earlier tests (Ray's driver, executors) that may end
    between the listing and the read: a thread that ended stays in no cgroup."""
    outside = {}
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        try:
            group = memory_cgroup(os.getpid(), int(tid))
            name = Path(f"/proc/{os.getpid()}/task/{tid}/comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if group != host:
            outside[f"{name} ({tid})"] = group
    return outside


@pytest.fixture
def v1() -> None:
    if detect()[0] is not Mode.V1:
        pytest.skip("bwrap is born in the cgroup on cgroup v1 as root only")


async def test_sessions_started_at_once_are_each_born_in_their_own_cgroup_and_no_host_thread_stays(v1: None) -> None:
    spec = SandboxSpec(backend="local", limits=Limits(memory=MEMORY))
    sandboxes = await asyncio.gather(*(LocalBackend().start(spec) for _ in range(SESSIONS)))
    try:
        host = memory_cgroup(os.getpid())
        assert threads_outside(host) == {}  # the spawner went back
        groups = set()
        for sandbox in sandboxes:
            bwrap_pid = sandbox._launcher.pid
            assert sandbox._memory.holds(bwrap_pid)
            groups.add(memory_cgroup(bwrap_pid))
            inside = await sandbox.exec(["sh", "-c", "grep memory /proc/self/cgroup /proc/1/cgroup"])
            assert inside.exit_code == 0 and all(line.endswith(":/") for line in inside.stdout.decode().split())
        assert len(groups) == SESSIONS and host not in groups
    finally:
        await asyncio.gather(*(s.close() for s in sandboxes))


async def test_the_memory_limit_oom_kills_inside_the_session_across_processes(v1: None) -> None:
    spec = SandboxSpec(backend="local", limits=Limits(memory=MEMORY))
    sandbox = await LocalBackend().start(spec)
    try:
        # three processes of 120 MiB each: each under RLIMIT_AS, together past the cgroup's 256 MiB
        three = "for i in 1 2 3; do python3 -c 'import time; x = bytearray(120 * 2**20); time.sleep(3)' & done; wait"
        done = await sandbox.exec(["sh", "-c", three])
        assert sandbox._memory.oom_kills() >= 1
        assert b"killed at the sandbox's memory limit" in done.stderr
        after = await sandbox.exec(["echo", "alive"])  # the session goes on
        assert after.stdout == b"alive\n"
    finally:
        await sandbox.close()


class Interrupted(Exception):
    """What the test's signal handler raises in the waiting caller (as KeyboardInterrupt would)."""


def test_a_caller_interrupted_while_the_spawner_works_waits_for_it_before_going_on() -> None:
    """The spawner thread starts bwrap with the caller's descriptors (the gate's pipes, the
    memfds, the control socket). A signal raising in the caller while it waits (a second Ctrl-C
    under asyncio.run, a plain KeyboardInterrupt) made it close them at once, while bwrap was
    still being spawned with those numbers (closed, or reused by another file of the host)."""
    finished = threading.Event()

    def job() -> None:
        time.sleep(0.5)
        finished.set()

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.1, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(Interrupted):
            spawner.run(job)
        assert finished.is_set()  # the caller goes on (to its cleanup) only once the spawn is done
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
