"""A Docker run's binding (`sandboxes.docker.bindings`) and what recovery makes of it once its
owner is dead and its container is gone (its recovery window passed): the loss named (run_end
`error` saying why, the binding removed), or, when the owner's own save had finished (a kill
while closing), `recovered` with what the run folder holds and the partial archive removed; a
living owner's binding is left alone. The engine is asked about a container no one made (gone);
the backend here only hands recovery the bindings. Saving a live container: tests/faults/test_docker_loss.py."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from backends import require_backend
from coderoom.record import read_record
from coderoom.recovery import CAUSE, recover
from coderoom.sandboxes import records
from coderoom.sandboxes.docker import bindings
from coderoom.sandboxes.leases import Owner
from coderoom.sandboxes.orphans import Orphan
from coderoom.sandboxes.spec import SandboxSpec

CONTAINER = "0123456789abcdef" * 4


class BindingsOnly:
    """The Docker backend's `abandoned_runs`, without asking an engine whether it runs."""

    name = "docker"

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        return None

    def abandoned_runs(self, spec: SandboxSpec) -> list[Orphan]:
        return bindings.abandoned_runs(spec.limits)


@pytest.fixture(autouse=True)
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_backend("docker")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again


def run_folder(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "session-1"
    run_dir.mkdir(parents=True)
    (run_dir / "run.jsonl").write_text(json.dumps({"type": "run_start", "run_id": "r1", "job": {}}) + "\n")
    return run_dir


def bound_to_a_dead_owner(run_dir: Path) -> Path:
    folder = bindings.bind(None, CONTAINER, run_dir, "r1", "/workspace")
    gone = subprocess.Popen(["true"])
    gone.wait()
    me = Owner.me()
    lease = {"boot": me.boot, "pid": gone.pid, "start": 1, "pidns": me.pidns}
    records.write(folder, "lease", json.dumps(lease).encode(), replace=True)
    return folder


async def test_a_dead_owners_workspace_whose_container_is_gone_is_named_lost(tmp_path: Path) -> None:
    run_dir = run_folder(tmp_path)
    folder = bound_to_a_dead_owner(run_dir)
    [outcome] = await recover(SandboxSpec(), run_dir.parent, backend=BindingsOnly())  # type: ignore[arg-type]
    assert outcome.lost and outcome.describe().startswith("lost ")
    end = read_record(run_dir).events[-1]
    assert (end.type, end.status, end.cause, end.saved) == ("run_end", "error", CAUSE, [])
    assert end.error and "Docker container '0123456789ab'" in end.error and "it is gone" in end.error
    assert not folder.exists()
    assert await recover(SandboxSpec(), run_dir.parent, backend=BindingsOnly()) == []  # type: ignore[arg-type]  # ended once, not again


async def test_a_save_finished_before_the_kill_is_recovered_and_its_partial_removed(tmp_path: Path) -> None:
    run_dir = run_folder(tmp_path)
    (run_dir / "workspace.tar").write_bytes(b"whole")
    (run_dir / "workspace.tar.partial").write_bytes(b"cut")
    (run_dir / "output").mkdir()
    (run_dir / "output" / "k.txt").write_text("k")
    bound_to_a_dead_owner(run_dir)
    [outcome] = await recover(SandboxSpec(), run_dir.parent, backend=BindingsOnly())  # type: ignore[arg-type]
    assert not outcome.lost and outcome.problem is None
    end = read_record(run_dir).events[-1]
    assert (end.status, end.error, end.saved) == ("recovered", None, ["workspace.tar", "output/k.txt"])
    assert not (run_dir / "workspace.tar.partial").exists()


async def test_a_living_owners_binding_is_left_alone_until_unbound(tmp_path: Path) -> None:
    run_dir = run_folder(tmp_path)
    folder = bindings.bind(None, CONTAINER, run_dir, "r1", "/workspace")  # this process: alive
    assert await recover(SandboxSpec(), run_dir.parent, backend=BindingsOnly()) == []  # type: ignore[arg-type]
    assert bindings.prune() == 0 and folder.exists()
    bindings.unbind(folder)
    assert not folder.exists()


def test_a_container_s_bindings_are_found_by_their_run_record_not_their_folder_name(tmp_path: Path) -> None:
    run_dir = run_folder(tmp_path)
    folder = bindings.bind(None, CONTAINER, run_dir, "r1", "/workspace")
    renamed = folder.rename(folder.with_name(f"{bindings.PREFIX}renamed"))
    look_alike = bindings.bind(None, CONTAINER[:12] + "f" * 52, run_dir, "r1", "/workspace")  # same first 12
    assert look_alike.name.startswith(f"{bindings.PREFIX}{CONTAINER[:12]}-")
    unrecorded = Path(tempfile.mkdtemp(prefix=f"{bindings.PREFIX}{CONTAINER[:12]}-"))  # no run record
    oversized = Path(tempfile.mkdtemp(prefix=bindings.PREFIX))  # a record past its bound is not read
    padded = {"container": CONTAINER, "run_dir": str(run_dir), "owner": "r1", "pad": "x" * records.MAX_RUN_RECORD}
    records.write(oversized, records.RUN_FILE, json.dumps(padded).encode())
    assert bindings.of_container(CONTAINER) == [renamed]
    assert bindings.of_container(CONTAINER[:12]) == []  # the whole id, not a prefix
    assert unrecorded.exists()
