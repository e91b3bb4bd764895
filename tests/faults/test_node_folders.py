"""A Ray session actor's runs folder on its node (`cluster.node_folders`, attack R-B8), and a
batch job's (attack R-C5): leased to the worker's process, so `sandbox prune` removes a dead
worker's folder and never a live one's (stopped or not) nor one a recovery is saving into. No
cluster: the workers are plain processes that make their folder as `SessionActor` and
`batch.on_node.run_on_node` do, each test with a temp dir of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coderoom.cluster import node_folders
from coderoom.recovery import recover
from coderoom.sandboxes import recovering
from coderoom.sandboxes.orphans import Orphan
from coderoom.sandboxes.spec import SandboxSpec

MAKE = "from coderoom.cluster import node_folders; f = node_folders.make(); (f / 'session-1').mkdir(); print(f, flush=True)"


@pytest.fixture(autouse=True)
def own_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path

JOB = ("from coderoom.cluster import node_folders; import os, signal\n"
       "with node_folders.leased(node_folders.BATCH_PREFIX) as f:\n"
       "    (f / 'job-1').mkdir(); print(f, flush=True); os.kill(os.getpid(), signal.SIGKILL)")  # fmt: skip
"""A batch job's worker killed mid-job, as a forced cancel (`ray.cancel(force=True)`) kills it."""


def made_by_a_dead_actor() -> Path:
    done = subprocess.run([sys.executable, "-c", MAKE], capture_output=True, text=True, check=True, timeout=60)
    return Path(done.stdout.strip())


@pytest.fixture
def stopped_actor() -> Iterator[Path]:
    """A folder whose actor is alive but stopped (SIGSTOP): Ray would count it alive too."""
    process = subprocess.Popen([sys.executable, "-c", MAKE + "; import time; time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        folder = Path(process.stdout.readline().strip())
        os.kill(process.pid, signal.SIGSTOP)
        yield folder
    finally:
        process.kill()
        process.wait(30)


def test_a_dead_actors_folder_is_removed_and_a_live_ones_kept(stopped_actor: Path) -> None:
    dead, own = made_by_a_dead_actor(), node_folders.make()
    skipped: list[str] = []
    assert node_folders.prune(skipped) == 1 and skipped == []
    assert not dead.exists()
    assert own.is_dir() and stopped_actor.is_dir()


def test_a_killed_batch_jobs_folder_is_removed_and_a_running_ones_kept() -> None:
    killed = subprocess.run([sys.executable, "-c", JOB], capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    dead = Path(killed.stdout.strip())
    assert dead.name.startswith(node_folders.BATCH_PREFIX) and (dead / "job-1").is_dir()  # left behind
    with node_folders.leased(node_folders.BATCH_PREFIX) as running:
        assert node_folders.prune() == 1 and not dead.exists()
        assert running.is_dir()
    assert not running.exists()  # a job that returns removes its own


def test_a_folder_without_lease_is_judged_as_every_leaseless_folder(own_temp: Path) -> None:
    fresh = Path(tempfile.mkdtemp(prefix=node_folders.PREFIX))  # made a moment ago: its lease may still come
    assert node_folders.prune() == 0 and fresh.is_dir()
    os.utime(fresh, (0, 0))  # older than leases.LEASELESS_GRACE_S
    assert node_folders.prune() == 1 and not fresh.exists()


def test_a_folder_someone_else_may_change_is_not_ours_to_remove() -> None:
    dead = made_by_a_dead_actor()
    dead.chmod(0o777)
    assert node_folders.prune() == 0 and dead.is_dir()


def test_a_dead_actors_folder_a_recovery_saves_into_is_left_until_it_is_done() -> None:
    dead = made_by_a_dead_actor()
    with recovering.held(dead / "session-1") as mine:  # as `recovery` holds the run folder it saves into
        assert mine
        assert node_folders.prune() == 0 and dead.is_dir()
    assert node_folders.prune() == 1 and not dead.exists()


class OneOrphan:
    """A backend with one dead owner's workspace, which must not be reopened while its run folder is held."""

    name = "fake"

    def __init__(self, orphan: Orphan) -> None:
        self.orphan = orphan

    def abandoned_runs(self, spec: SandboxSpec) -> list[Orphan]:
        return [self.orphan]

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        return None


async def test_a_recovery_leaves_a_workspace_whose_run_folder_a_prune_holds(tmp_path: Path) -> None:
    run_dir = made_by_a_dead_actor() / "session-1"
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    def reopen(**_: Any) -> Any:
        raise AssertionError("reopened while its run folder was held")

    backend: Any = OneOrphan(Orphan(workspace, run_dir, "run-1", reopen))
    with recovering.held(run_dir) as mine:  # as `node_folders.prune` holds it while it removes it
        assert mine
        [outcome] = await recover(SandboxSpec(), backend=backend)
    assert outcome.problem == recovering.BUSY
