"""A local session closed at any stage of its start leaves no process behind and its memory
cgroup removed: bwrap's pid 1, cloned but not yet woken by bwrap, used to stay blocked for good
(parent pid 1) when bwrap was killed before reporting it (see `spawn.kill_sandbox`)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session

QUICK_CYCLES = 15  # the leak showed within about 15 open/close cycles
STAGE_DELAYS_S = (0, 0, 0, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.05, 0.2)  # start, then close
GONE_WITHIN_S = 5.0  # for a killed process to leave /proc


def session_processes(folder: Path, group: Path | None) -> set[int]:
    """Live (not zombie) processes whose mounts name `folder` or that are in cgroup `group`."""
    marker = os.fsencode(folder)
    member = None if group is None else f"/{group.name}"  # its name is random: unique
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            mounts = Path(f"/proc/{pid}/mountinfo").read_bytes()
            cgroups = Path(f"/proc/{pid}/cgroup").read_text()
        except (OSError, IndexError):
            continue
        if marker in mounts or (member is not None and any(line.endswith(member) for line in cgroups.splitlines())):
            found.add(int(pid))
    return found


def assert_nothing_left(folder: Path, group: Path | None) -> None:
    end = time.monotonic() + GONE_WITHIN_S
    while (left := session_processes(folder, group)) and time.monotonic() < end:
        time.sleep(0.05)
    assert not left, f"processes of {folder} outlived it: {left}"
    assert group is None or not group.exists(), f"memory cgroup {group} was not removed"
    assert not folder.exists()


def cgroup_of(folder: Path) -> Path | None:
    from coderoom.sandboxes.local import host_dir

    record = folder / host_dir.CGROUP_FILE
    return Path(record.read_text()) if record.exists() else None


async def test_quick_open_close_cycles_leave_no_process() -> None:
    require_backend("local")
    from coderoom.sandboxes.local import host_dir

    parent = host_dir.parent()
    for _ in range(QUICK_CYCLES):
        before = set(parent.glob(f"{host_dir.PREFIX}*"))
        async with open_session(SandboxSpec(backend="local")):
            (folder,) = set(parent.glob(f"{host_dir.PREFIX}*")) - before
            group = cgroup_of(folder)
        assert_nothing_left(folder, group)


@pytest.mark.parametrize("network", [False, True], ids=["network-off", "network-on"])
async def test_a_close_at_any_stage_of_start_leaves_no_process(network: bool) -> None:
    """Start cancelled (or just finished) after each delay, then closed."""
    require_backend("local")
    from coderoom.sandboxes.local import bwrap
    from coderoom.sandboxes.local.sandbox import LocalSandbox

    if network:
        from coderoom.sandboxes.local import network as egress

        if egress.unavailable_reason():
            pytest.skip(egress.unavailable_reason())
    bw, reason = bwrap.probe()
    assert bw is not None, reason
    for delay in STAGE_DELAYS_S:
        sandbox = await LocalSandbox.create(Limits(network=network), bw)
        starting = asyncio.ensure_future(sandbox.start())
        await asyncio.wait({starting}, timeout=delay)
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        group = cgroup_of(sandbox.host_dir)
        await sandbox.close()
        assert_nothing_left(sandbox.host_dir, group)


def test_an_unadopted_prestart_closed_at_any_stage_leaves_no_process() -> None:
    """`spawn.Started.close` (a prestarted bwrap never adopted by an event loop) right away and
    after each delay."""
    require_backend("local")
    from coderoom.hostile import tree
    from coderoom.sandboxes.local import spawn

    for delay in STAGE_DELAYS_S:
        early = spawn.prestart(Limits())
        assert early is not None
        plan, started = early
        group = cgroup_of(plan.host_dir)
        time.sleep(delay)
        started.close()
        plan._release_launch()
        tree.remove_tree(plan.host_dir)
        assert_nothing_left(plan.host_dir, group)


ABANDON = """
import os, signal, sys, time
from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.local import spawn
sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]  # this folder, and tests/ (backends)
from test_start_close import cgroup_of, session_processes

for _ in range(int(sys.argv[2])):
    plan, started = spawn.prestart(Limits())
    children = f"/proc/{started.popen.pid}/task/{started.popen.pid}/children"
    while started.popen.poll() is None and not open(children).read().strip():
        pass  # until bwrap has cloned its pid 1
    started.popen.kill()  # as with its SIGKILLed owner (--die-with-parent), maybe before it woke pid 1
    started.popen.wait()
    started.sock.close()  # a launcher that did start now exits: only a blocked pid 1 stays
    time.sleep(0.2)
    if session_processes(plan.host_dir, cgroup_of(plan.host_dir)):
        break
print(plan.host_dir, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
ABANDON_TRIES = 100  # bwraps killed early until one leaves its pid 1 blocked


def test_prune_reclaims_a_pid_1_left_blocked_by_a_dead_owner() -> None:
    """The owner dies (SIGKILL) with its bwrap, which had not yet woken its pid 1: `prune` finds
    that pid 1 by its mounts and memory cgroup (bwrap's command line names no folder)."""
    require_backend("local")
    import subprocess
    import sys

    from coderoom.sandboxes.local import host_dir

    done = subprocess.run(
        [sys.executable, "-c", ABANDON, str(Path(__file__).parent), str(ABANDON_TRIES)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == -9, done.stderr
    folder = Path(done.stdout.strip())
    group = cgroup_of(folder)
    assert session_processes(folder, group), "no bwrap was left blocked: the case was not reached"
    host_dir.prune()
    assert_nothing_left(folder, group)
