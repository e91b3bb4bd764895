"""Exit policy and prune pass (attackexit, 2026-12-02), prune as root: PE2.

`leases.kill_users` takes every process whose command line names an abandoned folder, of any
uid: root's `prune` SIGKILLs the user's own pager, editor or `tail -f` on a file of that folder
(security.md says such a process "can only get itself killed"; a host process of another uid is
not the sandbox's to name). The canary here is a `sleep` of this test's own."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from coderoom.hostile import tree
from coderoom.sandboxes.local import host_dir, leases


def test_prune_spares_a_host_process_that_merely_names_the_folder() -> None:
    if os.geteuid() != 0:
        pytest.skip("the attack is on root's prune")
    folder = host_dir.make()
    viewer = subprocess.Popen(["sh", "-c", "sleep 60", "viewer", f"{folder}/workspace/log.txt"])
    try:
        time.sleep(0.2)
        leases.kill_users(folder, None, None)  # what `_reclaim` does first for an abandoned folder
        time.sleep(0.2)
        assert viewer.poll() is None, f"the user's viewer was killed ({viewer.returncode})"
    finally:
        viewer.kill()
        viewer.wait()
        tree.remove_tree(folder)
