"""The fake backend (tests/support/plugins, no isolation) is a plugin like any other: found through
the `coderoom.sandboxes` entry point, never offered (not in `backend_names()`, refused in a job
file, a flag and a record), reached only by code that names it with `unconfined_no_isolation=True`,
and absent altogether where its folder is not on the path (any process but pytest's)."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import tarfile
from importlib.metadata import entry_points
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from typer.testing import CliRunner

from coderoom.cli import app
from coderoom.errors import JobError, SandboxUnavailable
from coderoom.export.rerun import granted_sandbox, sandbox_notes
from coderoom.jobs import build_job
from coderoom.record import read_record
from coderoom.sandboxes import SandboxSpec, backend_names, get_backend
from coderoom.sandboxes.registry import backend_for
from coderoom.service import Session

PLUGINS = Path(__file__).resolve().parents[1] / "support" / "plugins"


def test_it_is_found_through_the_entry_point() -> None:
    (found,) = [ep for ep in entry_points(group="coderoom.sandboxes") if ep.name == "fake"]
    assert found.value == "coderoom_fake_backend:backend"
    assert Path(found.dist._path).parent == PLUGINS  # type: ignore[union-attr]
    with pytest.warns(UserWarning, match="no isolation"):
        backend = get_backend("fake", unconfined_no_isolation=True)
    assert backend is found.load() and backend.isolates is False


def test_it_is_never_offered() -> None:
    assert "fake" not in backend_names()
    with pytest.raises(SandboxUnavailable, match="does not isolate; it is not offered"):
        get_backend("fake")


def test_a_job_file_cannot_choose_it() -> None:
    with pytest.raises(JobError, match="'fake' is not offered"):
        build_job({"prompt": "p", "sandbox": {"backend": "fake"}})


@pytest.mark.parametrize("command", [["sandbox", "run", "--sandbox", "fake", "--", "true"], ["run", "--sandbox", "fake", "--model", "offline", "say hi"]])
def test_a_flag_cannot_choose_it(command: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(PLUGINS)}  # installed in the child too: still refused
    done = subprocess.run([sys.executable, "-m", "coderoom", *command], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "fake" in done.stderr and "not offered" in done.stderr


def test_without_its_folder_on_the_path_it_does_not_exist() -> None:
    probe = (
        "from importlib.metadata import entry_points\n"
        "from coderoom.sandboxes import backend_names, get_backend\n"
        "print(sorted(ep.name for ep in entry_points(group='coderoom.sandboxes')), backend_names())\n"
        "get_backend('fake', unconfined_no_isolation=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert "'fake'" not in done.stdout and "['local', 'docker']" in done.stdout, done.stdout
    assert done.returncode == 1 and "unknown sandbox backend 'fake'" in done.stderr


def test_a_handed_in_backend_must_carry_the_specs_name(fake_backend: Any) -> None:
    assert backend_for(SandboxSpec(backend="fake"), fake_backend) is fake_backend
    with pytest.raises(SandboxUnavailable, match="handed in is 'fake', the spec names 'local'"):
        backend_for(SandboxSpec(backend="local"), fake_backend)


async def test_a_session_on_it_records_the_fake_which_a_record_cannot_choose(fake_backend: Any, tmp_path: Path) -> None:
    session = await Session.open(model="offline", runs_dir=tmp_path, sandbox="fake", backend=fake_backend)
    done = await session.exec("echo hi")
    run_dir = await session.close()
    assert done.stdout.strip() == "hi" and fake_backend.started[-1].backend == "fake"
    recorded = read_record(run_dir).events[0].job["sandbox"]  # type: ignore[union-attr]
    assert recorded["backend"] == "fake"
    # the record cannot choose it: rerun takes its backend from --sandbox, which refuses the fake
    granted = granted_sandbox(None, timeout=60, network=False)
    assert granted.backend == "local" and "a record never chooses the backend" in sandbox_notes(recorded, granted)[0]
    rerun = ["rerun", str(run_dir), "--sandbox", "fake", "--out", str(tmp_path / "o")]
    refused = await asyncio.to_thread(CliRunner().invoke, app, rerun)
    assert refused.exit_code == 2 and "'fake' is not offered" in refused.output


async def test_its_core_sandbox_runs_reads_writes_and_round_trips_a_tar(fake_backend: Any) -> None:
    sandbox = await fake_backend.start(SandboxSpec(backend="fake"))
    try:
        await sandbox.write_file(PurePosixPath("a/b.txt"), b"data")
        assert (await sandbox.exec(["cat", "a/b.txt"])).stdout == b"data"
        assert await sandbox.read_file(PurePosixPath("a/b.txt"), max_bytes=4) == b"data"
        with pytest.raises(OverflowError):
            await sandbox.read_file(PurePosixPath("a/b.txt"), max_bytes=3)
        with pytest.raises(PermissionError):
            await sandbox.read_file(PurePosixPath("../x"), max_bytes=3)
        names = tarfile.open(fileobj=await sandbox.archive()).getnames()
        assert "a/b.txt" in names
        tar = io.BytesIO()
        with tarfile.open(fileobj=tar, mode="w") as out:
            info = tarfile.TarInfo("c.txt")
            info.size = 2
            out.addfile(info, io.BytesIO(b"ok"))
        tar.seek(0)
        await sandbox.hydrate(tar)
        assert await sandbox.read_file(PurePosixPath("c.txt"), max_bytes=2) == b"ok"
        slow = await sandbox.exec(["sleep", "5"], timeout=0.2)
        assert (slow.exit_code, slow.timed_out) == (124, True)
    finally:
        await sandbox.close()
    assert not sandbox.root.exists()
