"""Local launcher's preparer attack pass (attackpre, 2026-12-07): S-Q1..S-Q9.

The launcher forks one preparer that clones every slot's init with CLONE_PARENT (issue 25). A
command should not reach, signal or starve it; every slot it makes should carry the command's
settings; its death or stop, from the host, should end the session's commands within bounds,
leave nothing behind, and let the next command start another launcher."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from pathlib import Path

import pytest
from backends import require_backend
from sandbox import test_local_launcher_slots as slots
from sandbox.hostside import host_processes_with, once_made, seen_running, until

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.local.launcher import LAUNCHER_LOST
from coderoom.sandboxes.session import open_session


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


async def the_preparer(session) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """The launcher's host pid and its one preparer's."""
    launcher = await slots.launcher_pid(session)
    (preparer,) = slots.slots_and_preparers(launcher)[1]
    return launcher, preparer


async def gone(pid: int, within: float = 5.0) -> bool:
    return await until(lambda: slots.state(pid) == "", within)


# every process a command can see, and a SIGKILL to all of them (kill(-1): its whole namespace)
REACH = r"""
import os, signal
print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
print("paths", sorted({line.split()[7] for line in open("/proc/net/unix").read().splitlines()[1:] if len(line.split()) > 7}))
os.kill(-1, signal.SIGKILL)
"""


async def test_s_q1_a_command_sees_only_its_own_namespace_and_its_kill_all_leaves_the_preparer() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        assert (await session.exec("true")).exit_code == 0
        launcher, preparer = await the_preparer(session)
        looked = await session.exec("python3", "-c", REACH, shell=False)
        after = await session.exec("echo next")
        assert await the_preparer(session) == (launcher, preparer)
    assert await gone(preparer) and await gone(launcher)  # and nothing of them after the close
    lines = looked.stdout.decode().splitlines()
    assert lines[0] == "pids [1, 2]", lines  # its init and itself: no preparer, no launcher
    assert lines[1] == "paths []", lines  # no named unix socket: the preparer's is a socketpair
    assert (after.exit_code, after.stdout) == (0, b"next\n")


# what a command runs with: every one comes from a slot the preparer cloned
SETTINGS = r"""
import os, resource
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
print(" ".join(status[k].strip() for k in ("Seccomp", "NoNewPrivs", "CapEff", "CapPrm", "CapBnd", "NSpid")),
      open("/proc/self/oom_score_adj").read().strip(), open("/proc/self/cgroup").read().splitlines()[-1],
      resource.getrlimit(resource.RLIMIT_NPROC), os.readlink("/proc/self/ns/pid"), os.readlink("/proc/self/ns/mnt"),
      os.readlink("/proc/self/ns/ipc"), flush=True)
import sys, time; time.sleep(float(sys.argv[1]))
"""


async def test_s_q2_every_slot_the_preparer_makes_has_the_command_settings() -> None:
    """The first slot, slots cloned while other commands run, and slots asked for with none
    ready (three at once): the same filter, capabilities, rlimits, oom score and cgroup root,
    and namespaces of their own, none the preparer's."""
    async with open_session(SandboxSpec(backend="local", limits=Limits(pids=40))) as session:
        first = await session.exec("python3", "-c", SETTINGS, "0", shell=False)
        _, preparer = await the_preparer(session)
        launcher = await slots.launcher_pid(session)
        running = asyncio.gather(*(session.exec("python3", "-c", SETTINGS, "1", shell=False) for _ in range(3)))
        await asyncio.sleep(0.5)
        inits = slots.slots_and_preparers(launcher)[0]
        groups = {Path(f"/proc/{pid}/cgroup").read_text() for pid in [launcher, *inits]}
        together = await running
        own = {os.readlink(f"/proc/{preparer}/ns/{kind}") for kind in ("pid", "mnt", "ipc")}
    seen = [r.stdout.decode().split() for r in (first, *together)]
    for result, fields in zip((first, *together), seen):
        assert result.exit_code == 0, result.stderr
        assert fields[:7] == ["2", "1", "0000000000000000", "0000000000000000", "0000000000000000", "2", "1000"]
        assert fields[7] == "0::/" and fields[8:10] == ["(40,", "40)"], fields
    assert len(inits) >= 3 and len(groups) == 1  # every init in the launcher's (memory) cgroup
    live = [ns for fields in seen[1:] for ns in fields[10:13]]  # together: numbers not yet reused
    assert len(set(live)) == len(live)  # none shared
    assert own.isdisjoint(live)


# forks until the pids limit refuses, holds every child 3 s, then says how many it got
FILL_PIDS = r"""
import os, time
kids = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(3); os._exit(0)
    kids += 1
open("full", "w").close()
print("kids", kids, flush=True)
for _ in range(kids):
    os.wait()
"""


async def test_s_q3_a_command_filling_the_pids_limit_neither_stops_the_preparer_nor_passes_the_limit() -> None:
    """The preparer clones with the launcher's rlimits, not the command's: a full pids limit
    does not stop the next slot, and a command started meanwhile runs what needs no fork."""
    async with open_session(SandboxSpec(backend="local", limits=Limits(pids=24))) as session:
        assert (await session.exec("true")).exit_code == 0
        launcher, preparer = await the_preparer(session)
        hog = await once_made(session, FILL_PIDS, "full")
        during = await session.exec("echo", "during", shell=False)
        filled = await hog
        after = [await session.exec("echo after") for _ in range(2)]
        assert await the_preparer(session) == (launcher, preparer)
    assert filled.exit_code == 0, filled.stderr
    kids = int(filled.stdout.split()[1])
    assert 0 < kids < 24  # the limit held (the launcher, preparer and slots count in it too)
    assert (during.exit_code, during.stdout) == (0, b"during\n"), during.stderr
    for result in after:
        assert (result.exit_code, result.stdout) == (0, b"after\n"), result.stderr


async def test_s_q4_a_preparer_killed_mid_command_ends_that_command_as_lost_and_leaves_nothing() -> None:
    marker = uuid.uuid4().hex[:10]
    async with open_session(SandboxSpec(backend="local")) as session:
        assert (await session.exec("true")).exit_code == 0
        launcher, preparer = await the_preparer(session)
        running = await seen_running(session, f"sleep 30; : {marker}", marker)
        began = time.monotonic()
        os.kill(preparer, signal.SIGKILL)
        lost = await running
        took = time.monotonic() - began
        assert await gone(launcher)
        assert not host_processes_with(marker)
        again = await session.exec("echo still here")
        own = await session.exec("exit 125")
    assert lost.exit_code == LAUNCHER_LOST, lost.stderr
    note = lost.stderr.decode().strip().splitlines()[-1]
    assert note.startswith("[coderoom: the sandbox launcher stopped") and note.endswith("starts another]"), note
    assert (again.exit_code, again.stdout) == (0, b"still here\n")
    assert (own.exit_code, own.stderr) == (LAUNCHER_LOST, b"")  # its own 125: no note
    assert took < 5


async def test_s_q5_a_stopped_preparer_stops_its_launcher_within_a_bound_of_its_own_and_leaves_nothing() -> None:
    """SIGSTOP from the host after the ready slot is taken: the next request waits for a slot
    that never comes, reading no kill and no other command's exit meanwhile. The launcher waits
    10 s at most (not the command's 120 s timeout plus the host's kill), then stops, saying why;
    the next command starts another."""
    async with open_session(SandboxSpec(backend="local")) as session:
        assert (await session.exec("true")).exit_code == 0
        launcher, preparer = await the_preparer(session)
        await slots.ready_slot(session)
        os.kill(preparer, signal.SIGSTOP)
        try:
            took_ready = await session.exec("echo took the ready slot")
            began = time.monotonic()
            held = await asyncio.wait_for(session.exec("echo never"), 30)
            took = time.monotonic() - began
            assert await gone(preparer) and await gone(launcher)
        finally:
            if slots.state(preparer) != "":
                os.kill(preparer, signal.SIGCONT)
        again = await session.exec("echo still here")
    assert (took_ready.exit_code, took_ready.stdout) == (0, b"took the ready slot\n")
    assert (held.exit_code, held.stdout) == (LAUNCHER_LOST, b""), held.stderr
    assert b"preparer did not answer in 10 s; the next command starts another]" in held.stderr, held.stderr
    assert 10 <= took < 10 + 5, took  # slack for a loaded machine
    assert (again.exit_code, again.stdout) == (0, b"still here\n")


async def test_s_q8_commands_ending_while_the_next_slot_is_asked_for_all_run_once() -> None:
    """Ends racing requests: eight at a time, each request finding the ready slot taken, the
    preparer's answer in flight or an exit report beside it."""
    async with open_session(SandboxSpec(backend="local")) as session:
        assert (await session.exec("true")).exit_code == 0
        launcher, preparer = await the_preparer(session)
        results = []
        for round_ in range(3):
            results += await asyncio.gather(*(session.exec(f"echo {round_}-{i}") for i in range(8)))
        assert await the_preparer(session) == (launcher, preparer)
    assert [(r.exit_code, r.stdout) for r in results] == [
        (0, f"{round_}-{i}\n".encode()) for round_ in range(3) for i in range(8)
    ]


# fills its /tmp and /dev/shm until the kernel refuses, then holds them
FILL_TMP = r"""
import os, time
for folder in ("/tmp", "/dev/shm"):
    with open(folder + "/fill", "wb") as f:
        try:
            while True:
                f.write(b"x" * 65536); f.flush()
        except OSError as exc:
            print(folder, exc.errno, flush=True)
open("full", "w").close()
time.sleep(3)
"""


async def test_s_q9_a_command_with_a_full_tmp_leaves_the_next_slot_an_empty_one() -> None:
    async with open_session(SandboxSpec(backend="local", limits=Limits(tmp_size="8M"))) as session:
        hog = await once_made(session, FILL_TMP, "full")
        during = await session.exec("echo ok > /tmp/a && cat /tmp/a && ls /tmp /dev/shm")
        filled = await hog
    assert filled.stdout.decode().split() == ["/tmp", "28", "/dev/shm", "28"], filled.stderr  # ENOSPC
    assert (during.exit_code, during.stdout) == (0, b"ok\n/dev/shm:\n\n/tmp:\na\n"), during.stderr
