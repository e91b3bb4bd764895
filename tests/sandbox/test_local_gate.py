"""Local backend: the gate. bwrap's pid 1 waits after its setup until the host has made sure it
is in the session's memory cgroup (born there on cgroup v1, moved there on v2) and, as root,
checked the uid bwrap runs as (`local/gate.py`). Nothing of the sandbox runs before the gate
opens, and nothing at all when it stays shut. bwrap goes on at EOF on --block-fd just as at a
byte (what pid 1 reads when the host dies at the gate), so a launcher that starts un-admitted
is sent nothing (and on v2 stops before it prepares anything)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from backends import require_backend

from coderoom.errors import SandboxFailed
from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.local import bwrap, gate, spawn
from coderoom.sandboxes.local.cgroup import MemoryCgroup, Mode, mode
from coderoom.sandboxes.local.sandbox import LocalSandbox
from coderoom.sandboxes.oneshot import run_once
from coderoom.sandboxes.session import open_session

from .hostside import host_processes_with, seen_running

@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


def needs_cgroup() -> None:
    if mode() is Mode.NONE:
        pytest.skip("no memory cgroup here (cgroup v1 as root, or a delegated v2)")


def memory_cgroup_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") or controllers == "":
            return path
    raise AssertionError(f"no memory cgroup line for pid {pid}")


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


async def test_the_launcher_and_every_command_run_in_the_session_memory_cgroup() -> None:
    needs_cgroup()
    marker = f"gate-{uuid.uuid4().hex}"
    async with open_session(SandboxSpec(backend="local")) as session:
        sandbox = session._inner.sandbox
        command = await seen_running(session, f"sh -c 'sleep 30 & sleep 30; : {marker}'", marker)
        session_cgroup = sandbox._memory.path.name
        bwrap_pid = sandbox._launcher.pid
        pid1 = await sandbox._launcher.sandbox_pid()
        (launcher,) = children(pid1)
        shell = host_processes_with(marker)
        inside = [pid1, launcher, *shell, *(child for pid in shell for child in children(pid))]
        placed = {pid: memory_cgroup_of(pid) for pid in inside}
        outer = memory_cgroup_of(bwrap_pid)
        seen_inside = await session.exec("grep -E '(^|:)memory:|^0::' /proc/self/cgroup")
        command.cancel()
    assert len(inside) >= 5  # pid 1, launcher, sh, and both sleeps (the command's own init too)
    assert all(path.endswith("/" + session_cgroup) for path in placed.values()), placed
    # bwrap's monitor runs nothing of the sandbox: born in the cgroup on v1, left outside on v2
    assert outer.endswith("/" + session_cgroup) == (mode() is Mode.V1)
    assert seen_inside.stdout.decode().strip().rsplit(":", 1)[1] == "/"  # a cgroup namespace of its own


async def test_no_thread_of_the_host_is_left_in_a_session_memory_cgroup() -> None:
    """On cgroup v1 bwrap is born in the cgroup from a host thread that moved itself in; the
    thread moves back out, so the session's cgroup holds the session's processes only."""
    needs_cgroup()
    async with open_session(SandboxSpec(backend="local")) as session:
        sandbox = session._inner.sandbox
        await session.exec("true")
        tasks = set((sandbox._memory.path / "tasks").read_text().split())
        ours = set(os.listdir("/proc/self/task"))
    assert tasks and not tasks & ours


async def test_a_failed_admission_stops_the_sandbox_before_anything_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_cgroup()

    def refuse(self: MemoryCgroup, pid: int) -> None:
        raise OSError(28, "canary: cgroup full")

    monkeypatch.setattr(MemoryCgroup, "admit", refuse)
    await assert_stopped_at_the_gate("stopped at its start: .*canary: cgroup full")


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: bwrap then runs as uid 65534")
async def test_bwrap_running_as_host_root_is_stopped_at_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a switch to uid 65534 that did not hold (`unprivileged`) would give: bwrap as root."""
    monkeypatch.setattr(bwrap, "as_unprivileged", lambda bw, fd: bwrap.direct(bw))
    await assert_stopped_at_the_gate("bwrap does not run as uid/gid 65534 with no groups")


async def assert_stopped_at_the_gate(reason: str) -> None:
    """A new sandbox's first command fails with `reason` (a regex), and it never ran."""
    found, _ = bwrap.probe()
    assert found is not None
    sandbox = await LocalSandbox.create(Limits(), found)
    try:
        with pytest.raises(SandboxFailed, match=reason):
            await sandbox.exec(["touch", "ran"])
        assert not (sandbox.workspace_dir / "ran").exists()
    finally:
        await sandbox.close()


def test_the_launcher_bytecode_names_no_host_path() -> None:
    code = spawn._compiled_launcher()
    assert os.fsencode(spawn.LAUNCHER_SOURCE.parent) not in code
    assert os.fsencode(str(Path(spawn.__file__).parents[3])) not in code
    assert b"launcher_inner.py" in code


async def test_a_gate_opened_by_eof_runs_no_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """G04: the gate's write end closes before pid 1 is admitted (the host killed at the gate,
    here without killing the test). Before the fix the launcher started outside the cgroup,
    prepared a command namespace and said ready; a command then ran with no memory limit. Now
    the host sends nothing to a launcher whose pid 1 the gate did not admit (and on cgroup v2
    such a launcher stops by itself, finding itself outside the cgroup)."""
    needs_cgroup()

    def open_without_admitting(self: gate.Admission) -> None:
        self._read_pid()
        os.close(self._info_r)
        os.close(self._block_w)  # EOF at pid 1, as when this process dies at the gate
        self._block_w = -1

    monkeypatch.setattr(gate.Admission, "_admit", open_without_admitting)
    spec = SimpleNamespace(backend="local", limits=Limits())
    with pytest.raises(SandboxFailed, match="not admitted to its memory cgroup|without being admitted"):
        await run_once(spec, ["echo", "ran past an open gate"], None)  # type: ignore[arg-type]
