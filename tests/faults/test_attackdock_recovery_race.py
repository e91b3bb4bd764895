"""Attack pass D-R (2026-12-06): two recoveries of one dead owner's kept Docker container at
once (a restarted server and `coderoom sandbox prune`). Before: the second's exec found the
first's beside PID 1 and was refused, `prune` (remove_unsaved) ended the run `error` and removed
the container under the first, whose archiver died (137): the workspace was lost although it
was being saved. Now a recovery holds its workspace's folder (`sandboxes.recovering`, fixed
on main at the same time as this pass found it): the other skips it, and prune leaves its
binding and container alone.

Real Docker engine; the owner is a finished process's pid (the way tests/core/test_docker_bindings.py
makes a dead owner); the container is removed by id; prune's container pass (machine-wide) is
not run, only what it asks.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import require_backend
from coderoom.record import read_record
from coderoom.recovery import recover
from coderoom.sandboxes import Limits, SandboxSpec, get_backend, records, recovering
from coderoom.sandboxes.docker import bindings
from coderoom.sandboxes.leases import Owner
from coderoom.sandboxes.orphans import Orphan

pytestmark = pytest.mark.docker

LIMITS = Limits(timeout=20, workspace_size="64M", pids=64)


class BindingsOnly:
    """The Docker backend's `abandoned_runs`, without the engine ping."""

    name = "docker"

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        return None

    def abandoned_runs(self, spec: SandboxSpec) -> list[Orphan]:
        return bindings.abandoned_runs(spec.limits)


@pytest.fixture(autouse=True)
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    require_backend("docker")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)
    yield


def run_folder(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "session-1"
    run_dir.mkdir(parents=True)
    (run_dir / "run.jsonl").write_text(json.dumps({"type": "run_start", "run_id": "r1", "job": {}}) + "\n")
    return run_dir


def bind_to_a_dead_owner(container: str, run_dir: Path, root: str) -> Path:
    folder = bindings.bind(None, container, run_dir, "r1", root)
    gone = subprocess.Popen(["true"])
    gone.wait()
    me = Owner.me()
    lease = {"boot": me.boot, "pid": gone.pid, "start": 1, "pidns": me.pidns}
    records.write(folder, "lease", json.dumps(lease).encode(), replace=True)
    return folder


async def test_a_restart_and_a_prune_at_once_save_the_workspace_once(tmp_path: Path) -> None:
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=LIMITS))
    try:
        await box.exec(["sh", "-c", "head -c 20000000 /dev/urandom > big.bin"])  # an archive that takes a while
        run_dir = run_folder(tmp_path)
        bind_to_a_dead_owner(box.container_id, run_dir, box.root)
        box.keep_for_recovery(120)
        box.channel()._raw.shutdown(socket.SHUT_RDWR)  # its owner's connection drops
        server, prune = await asyncio.gather(
            recover(SandboxSpec(limits=LIMITS), run_dir.parent, backend=BindingsOnly()),  # type: ignore[arg-type]
            recover(SandboxSpec(limits=LIMITS), run_dir.parent, remove_unsaved=True, backend=BindingsOnly()),  # type: ignore[arg-type]
        )
        ends = [event for event in read_record(run_dir).events if event.type == "run_end"]
        assert [(end.status, end.saved) for end in ends] == [("recovered", ["workspace.tar"])], [o.describe() for o in server + prune]
    finally:
        subprocess.run(["docker", "rm", "-f", box.container_id], capture_output=True, timeout=60)


def test_prune_leaves_a_binding_another_process_is_recovering(tmp_path: Path) -> None:
    container = "0123456789abcdef" * 4
    folder = bind_to_a_dead_owner(container, run_folder(tmp_path), "/workspace")
    with recovering.held(folder) as ours:
        assert ours
        assert bindings.of_container(container) == [folder]  # what prune's container pass holds first
        assert bindings.prune() == 0 and folder.exists()
    assert bindings.prune() == 1 and not folder.exists()
