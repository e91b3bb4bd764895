"""Local backend as root: the spawner thread starts each session's bwrap as uid/gid 65534 with no
groups inside the session's views namespace (`local/unprivileged.py`), taking that namespace and
those ids for itself alone and only for the spawn. bwrap gains no capability by the exec; every
thread of the host keeps its ids and its mount namespace, the process stays dumpable, and a
spawner thread that could not take its own state back runs nothing again."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.errors import SandboxFailed
from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.local import bwrap, unprivileged
from coderoom.sandboxes.local.sandbox import LocalSandbox
from coderoom.sandboxes.local.spawner import Poisoned, spawner
from coderoom.sandboxes.session import open_session

NO_CAPABILITIES = ["0000000000000000"]


@pytest.fixture(autouse=True)
def _as_root() -> None:
    require_backend("local")
    if os.geteuid() != 0:
        pytest.skip("as root only: bwrap then runs as uid 65534")


def status(path: str) -> dict[str, list[str]]:
    lines = Path(path, "status").read_text().splitlines()
    return {key: value.split() for key, _, value in (line.partition(":") for line in lines)}


async def test_bwrap_and_its_pid_1_run_as_65534_with_no_groups_and_no_capabilities() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        assert (await session.exec("true")).exit_code == 0
        launcher = session._inner.sandbox._launcher
        seen = [status(f"/proc/{launcher.pid}"), status(f"/proc/{await launcher.sandbox_pid()}")]
    ids = [str(bwrap.UNPRIVILEGED_HOST_ID)] * 4
    for fields in seen:
        assert (fields["Uid"], fields["Gid"], fields.get("Groups", [])) == (ids, ids, [])
        assert [fields[name] for name in ("CapInh", "CapPrm", "CapEff", "CapAmb")] == [NO_CAPABILITIES] * 4


async def test_every_host_thread_keeps_its_ids_and_mount_namespace_and_the_process_stays_dumpable() -> None:
    host_namespace = os.readlink("/proc/self/ns/mnt")
    ids = (os.getresuid(), os.getresgid(), os.getgroups())
    async with open_session(SandboxSpec(backend="local")) as session:
        assert (await session.exec("true")).exit_code == 0
        threads = {tid: status(f"/proc/self/task/{tid}") for tid in os.listdir("/proc/self/task")}
        namespaces = {tid: os.readlink(f"/proc/self/task/{tid}/ns/mnt") for tid in threads}
    assert spawner.run(lambda: (os.getresuid(), os.getresgid(), os.getgroups())) == ids
    for tid, fields in threads.items():
        assert fields["Uid"] == [str(os.getuid())] * 4, tid
        assert namespaces[tid] == host_namespace, tid
    assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 1  # PR_GET_DUMPABLE


def test_a_spawner_thread_that_cannot_take_its_state_back_runs_nothing_again() -> None:
    """An undo that fails (here a step reporting failure, as a refused setns or setresuid would)
    retires the thread: the job fails with Poisoned, the thread stays (the sandboxes it started
    keep their parent) but runs no job again, and the next spawn gets a new thread."""
    before = spawner.run(threading.get_ident)
    with pytest.raises(Poisoned):
        spawner.run(lambda: unprivileged._give_back(lambda: -1))
    after = spawner.run(threading.get_ident)
    assert after != before
    assert before in {thread.ident for thread in threading.enumerate()}


async def test_a_spawner_that_cannot_take_its_state_back_after_spawning_leaves_no_bwrap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ids' undo fails once bwrap is spawned (injected after the real undo, so the thread is
    in fact restored): the start fails, saying why, and the bwrap it spawned is killed and
    reaped, not left waiting at its gate."""
    real = unprivileged._give_back

    def fails(*steps):  # type: ignore[no-untyped-def]
        real(*steps)
        if len(steps) == 4:  # the ids' undo (uid, gid, groups, dumpable), not the namespace's
            spawner.retire()
            raise Poisoned("canary: the ids could not be taken back")

    found, _ = bwrap.probe()
    assert found is not None
    sandbox = await LocalSandbox.create(Limits(), found)
    try:
        monkeypatch.setattr(unprivileged, "_give_back", fails)
        with pytest.raises(SandboxFailed, match="canary: the ids could not be taken back"):
            await sandbox.exec(["true"])
        monkeypatch.undo()
        assert bwraps_of_this_process() == []
        assert (await sandbox.exec(["true"])).exit_code == 0  # the next start, on a new spawner thread
    finally:
        await sandbox.close()


def bwraps_of_this_process() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = status(f"/proc/{pid}")
        except OSError:
            continue
        if fields.get("Name") == ["bwrap"] and fields.get("PPid") == [str(os.getpid())]:
            found.append(int(pid))
    return found
