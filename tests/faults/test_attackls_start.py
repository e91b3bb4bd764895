"""Local sandbox's faster start attack pass (attackls, 2026-12-07), a start that fails: L-S6,
L-S10.

A sandbox's start now makes about twenty fds in the host process before bwrap runs (the gate's
pipes, the control socket, a memfd for each file bwrap writes into the sandbox's root, bwrap's
status and stderr pipes and its arguments), on cgroup v1 from a thread moved into the session's
memory cgroup for the spawn. A host out of fds (a busy server) fails the start at whichever of
them comes first: each failure must leave nothing, or every later start fails too."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.hostile import tree
from coderoom.sandboxes import Limits
from coderoom.sandboxes.local import bwrap, host_dir, spawn


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


def open_files() -> dict[int, str]:
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the listing's own
    return found


def limit_leaving(spare: int, used: set[int]) -> int:
    """The RLIMIT_NOFILE under which exactly `spare` fds can be made (the lowest free numbers)."""
    number = free = 0
    while number in used or free < spare:
        free += number not in used
        number += 1
    return number


def children() -> list[str]:
    return [kid for task in os.listdir("/proc/self/task") for kid in Path(f"/proc/self/task/{task}/children").read_text().split()]


def test_l_s6_a_start_failing_for_want_of_fds_at_any_step_leaves_no_fd_process_or_cgroup() -> None:
    bw, reason = bwrap.probe()
    assert bw is not None, reason
    spawn._compiled_launcher()  # made once per process: not what is measured
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    failed_at = []
    for spare in range(80):  # each step one more fd: the start fails at each of them in turn
        folder = host_dir.make()
        plan = spawn.SandboxPlan(Limits(), bw, folder)
        before = open_files()
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit_leaving(spare, set(before)), hard))
        try:
            started = plan._spawn()
        except OSError as exc:
            started = None
            failed_at.append(exc.errno)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        if started is not None:
            started.close()
        try:
            plan._release_launch()  # the memory cgroup removed: nothing of ours left in it
        finally:
            tree.remove_tree(folder)
        assert open_files() == before, (spare, sorted(set(open_files().items()) - set(before.items())))
        assert children() == [], spare
        if started is not None:
            break
    assert started is not None, "no start within 80 fds"
    assert len(failed_at) > 10 and set(failed_at) == {24}, failed_at  # EMFILE, at every step before


# in a private mount namespace: every temp dir Python would use is a full tmpfs of its own
FULL_TEMP = """
for dir in /tmp /var/tmp /dev/shm; do
    mount -t tmpfs -o size=8k,mode=1777 tmpfs $dir && head -c 8192 /dev/zero > $dir/filler 2>/dev/null
done
cd /tmp && "$0" -m coderoom sandbox run -- echo ran
echo "exit $?" >&2
for dir in /tmp /var/tmp /dev/shm; do ls -A $dir >&2; done
"""


def test_l_s10_a_start_with_no_room_for_its_host_folder_says_so_and_leaves_nothing() -> None:
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("needs root and util-linux unshare for a private full /tmp")
    done = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", FULL_TEMP, sys.executable],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    said = done.stderr.splitlines()
    assert done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    assert said[0].startswith("coderoom: error: cannot make the sandbox's host folder:"), said
    assert said[1] == "exit 1", said
    assert said[2:] == ["filler"] * 3, said  # no session folder, nothing else
