"""Ray live-session pass (2026-12-06) on a real loopback cluster: a cluster with no room left, a
session whose actor's worker process is killed (SIGKILL) while its machine lives on, and one
whose worker stops answering (SIGSTOP) while Ray still counts it alive. See docs/security.md
"Ray live-session pass" (R-B).

The cluster is Ray's one-machine multi-node `Cluster` (`ray_sessions_cluster` in tests/conftest.py): a head
with no CPUs and two one-CPU nodes, so two sessions (cpus = 1) fill it. Sandboxes are real (local).
The nodes' temp dir (TMPDIR, where actors and local sandboxes make their folders) is this
module's own (`nodes_temp`), so `coderoom sandbox prune` run here judges only what these nodes left.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coderoom.artifacts import PARTIAL_SUFFIX, WORKSPACE_ARCHIVE
from coderoom.errors import SandboxUnavailable, SessionLost
from coderoom.record import read_record
from coderoom.service.ray_session import BUSY_GRACE_S, CLOSE_BOUND_S, RayOpener
from ray_cluster import descendants, left_on_the_node, ray_session_manager

REFUSAL_S = 120  # "at once" on 2 busy cores; the open's own wait for a node is OPEN_TIMEOUT_S (600 s)
LOSS_DEADLINE_S = 180
SLACK_S = 60  # for 2 busy cores, over a bound the code names
STOPPED_CALL_S = 10.0
"""The small call's deadline (`RayOpener`'s `call_s`) of the stopped-actor tests, a sixth of
`CALL_S`: what they prove (a stopped actor is found at its tail's deadline, whatever it is, and
ends every call) does not need the production 60 s waited out twice; a healthy actor on 2 busy
cores still answers a small call well within it (the open, the one call that starts a worker
process, has its own OPEN_TIMEOUT_S; a call to a running actor takes well under a second)."""
REFUSED_GRACE_S = 1.0
"""The refused open's wait for room (`RayOpener`'s `busy_grace_s`), cut from BUSY_GRACE_S (20 s):
it is refused after its grace, whatever it is (1 s: still a wait, not none); the open after the
closes has the servers' grace again (Ray frees a closed session's cpus a little after its close)."""


RAY_NODES = 2  # two sessions fill the cluster (`ray_sessions_cluster`, tests/conftest.py)


@pytest.fixture(scope="module", autouse=True)
def nodes_temp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The nodes' own temp dir (searchable by bwrap's uid when root), set before the cluster starts
    (an autouse fixture comes before the module's others); pytest's own temp folders stay where
    they were (its base is fixed first, for the modules after this one)."""
    tmp_path_factory.getbasetemp()
    folder = Path(tempfile.mkdtemp(prefix="coderoom-rayB-", dir="/tmp"))
    folder.chmod(0o755)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        patch.setattr(tempfile, "tempdir", str(folder))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def sandbox_owner(node: Any) -> tuple[int, list[int]]:
    """The actor's worker process on `node` (the parent of its bwrap) and the bwrap processes."""
    found = descendants(node.all_processes["raylet"][0].process.pid)
    sandboxes = [pid for pid, name in found.items() if name == "bwrap"]
    parents = {int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in sandboxes}
    [worker] = parents - set(sandboxes)
    return worker, sandboxes


def prune_the_node() -> subprocess.CompletedProcess[str]:
    """`coderoom sandbox prune` as a user runs it on the nodes' machine (Docker out of reach: its
    containers are the whole machine's, not this module's)."""
    environ = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    return subprocess.run([sys.executable, "-m", "coderoom", "sandbox", "prune"], capture_output=True, text=True,
                          env=environ, timeout=LOSS_DEADLINE_S, check=False)  # fmt: skip


def bound_into(folder: Path) -> list[Path]:
    """The local sandbox folders whose workspace is bound to a run folder inside `folder`."""
    from coderoom.sandboxes.local import host_dir

    found = []
    for sandbox in host_dir.parent().glob(f"{host_dir.PREFIX}*"):
        bound = host_dir.bound_run(sandbox)
        if bound is not None and bound[0].is_relative_to(folder):
            found.append(sandbox)
    return found


def remove_what_the_killed_actor_left(run_name: str) -> None:
    """The actor's temporary runs folder, and the local sandbox folder bound to its run (what
    `sandbox prune` would reclaim: removed here alone, not every abandoned folder of this user)."""
    from coderoom.sandboxes.local import host_dir

    for left in left_on_the_node(run_name):
        for folder in host_dir.parent().glob(f"{host_dir.PREFIX}*"):
            bound = host_dir.bound_run(folder)
            if bound is not None and bound[0].is_relative_to(left):
                host_dir.quiesce(folder)
                shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(left, ignore_errors=True)


async def test_a_session_opened_when_every_node_is_taken_is_refused_at_once(ray_sessions_cluster, tmp_path: Path) -> None:
    opener = RayOpener({}, busy_grace_s=REFUSED_GRACE_S)
    sessions = ray_session_manager(tmp_path / "runs", opener)
    async with sessions:
        first, second = await sessions.open(), await sessions.open()  # one per node: the cluster is full
        assert first.node != second.node
        started = time.monotonic()
        with pytest.raises(SandboxUnavailable, match="no room on the Ray cluster for this session now"):
            await asyncio.wait_for(sessions.open(), REFUSAL_S)  # was: queued by Ray for OPEN_TIMEOUT_S
        assert time.monotonic() - started < REFUSAL_S
        assert len(sessions.live) == 2
        await sessions.close(first.id)
        await sessions.close(second.id)
        opener.busy_grace_s = BUSY_GRACE_S
        after = await sessions.open()  # at once after a close: not refused while Ray frees its cpus
        await sessions.close(after.id)
    assert len(list((tmp_path / "runs").iterdir())) == 3  # the refused one left no run folder


async def test_a_close_whose_caller_is_cancelled_still_saves_the_session_and_ends_its_actor(ray_sessions_cluster, tmp_path: Path) -> None:
    sessions = ray_session_manager(tmp_path / "runs")
    async with sessions:
        session = await sessions.open()
        # a workspace that takes the node a while to save: the cancel lands while the node writes its archive
        assert (await session.exec("mkdir -p output && head -c 100M /dev/urandom > output/kept.bin")).exit_code == 0
        [node_copy] = left_on_the_node(session.run_dir.name)
        saving = node_copy / session.run_dir.name / (WORKSPACE_ARCHIVE + PARTIAL_SUFFIX)  # the archive until whole
        closing = asyncio.ensure_future(sessions.close(session.id))
        deadline = time.monotonic() + LOSS_DEADLINE_S
        while not saving.exists():  # the close is on the node, saving: seen, not guessed from a fixed wait
            assert not closing.done() and time.monotonic() < deadline, "the close ended before its save was seen"
            await asyncio.sleep(0.01)
        closing.cancel()  # an MCP client's cancel of its close_session, the reaper at shutdown
        deadline = time.monotonic() + LOSS_DEADLINE_S
        while left_on_the_node(session.run_dir.name):  # was: the actor lived on, its node's cpu held
            assert time.monotonic() < deadline, "the cancelled close left its actor and its folder on the node"
            await asyncio.sleep(1)
        assert sessions.live == []
    events = read_record(session.run_dir).events
    assert (events[-1].type, events[-1].status) == ("run_end", "ok")
    assert (session.run_dir / "workspace.tar").is_file()


async def test_a_session_whose_actor_worker_is_killed_is_lost_and_its_sandbox_dies_with_it(ray_sessions_cluster, tmp_path: Path) -> None:
    _, nodes = ray_sessions_cluster
    sessions = ray_session_manager(tmp_path / "runs")
    async with sessions:
        session = await sessions.open()
        node = next(n for n in nodes if n.node_id == session.node)
        worker, sandboxes = sandbox_owner(node)
        os.kill(worker, signal.SIGKILL)  # the actor's process, its machine alive
        with pytest.raises(SessionLost, match="died"):
            await asyncio.wait_for(session.exec("true"), LOSS_DEADLINE_S)
        deadline = time.monotonic() + 60
        while any(Path(f"/proc/{pid}").exists() for pid in sandboxes):  # --die-with-parent
            assert time.monotonic() < deadline, "the sandbox outlived its actor"
            await asyncio.sleep(0.5)
    events = read_record(session.run_dir).events
    assert (events[-1].type, events[-1].status) == ("run_end", "lost")
    try:
        assert left_on_the_node(session.run_dir.name) != []  # see the next test
    finally:
        remove_what_the_killed_actor_left(session.run_dir.name)


async def test_sandbox_prune_on_the_node_removes_what_a_killed_actor_left_and_spares_a_live_one(ray_sessions_cluster, tmp_path: Path) -> None:
    _, nodes = ray_sessions_cluster
    sessions = ray_session_manager(tmp_path / "runs")
    async with sessions:
        killed, live = await sessions.open(), await sessions.open()  # one per node, both on this machine
        assert (await killed.exec("echo kept > notes.txt")).exit_code == 0
        worker, _ = sandbox_owner(next(n for n in nodes if n.node_id == killed.node))
        os.kill(worker, signal.SIGKILL)
        with pytest.raises(SessionLost):
            await asyncio.wait_for(killed.exec("true"), LOSS_DEADLINE_S)
        try:
            [orphan] = left_on_the_node(killed.run_dir.name)  # was: kept for ever, a recovery saving into it
            assert bound_into(orphan) != []
            [alive] = left_on_the_node(live.run_dir.name)
            pruned = prune_the_node()
            assert pruned.returncode == 0, pruned.stderr
            assert "removed 1 dead Ray worker folder" in pruned.stdout
            assert left_on_the_node(killed.run_dir.name) == [] and bound_into(orphan) == []
            assert left_on_the_node(live.run_dir.name) == [alive] and bound_into(alive) != []  # a live actor's: untouched
            assert (await live.exec("true")).exit_code == 0
        finally:
            remove_what_the_killed_actor_left(killed.run_dir.name)
    assert (read_record(live.run_dir).events[-1].status) == "ok"


async def test_a_session_whose_actor_stopped_answering_is_lost_at_its_deadline_and_its_actor_ended(ray_sessions_cluster, tmp_path: Path) -> None:
    _, nodes = ray_sessions_cluster
    sessions = ray_session_manager(tmp_path / "runs", RayOpener({}, call_s=STOPPED_CALL_S))
    async with sessions:
        session = await sessions.open()
        assert session.call_s == STOPPED_CALL_S  # the opener's setting reached the session
        worker, _ = sandbox_owner(next(n for n in nodes if n.node_id == session.node))
        os.kill(worker, signal.SIGSTOP)  # alive to Ray, answering nothing
        try:
            started = time.monotonic()
            with pytest.raises(SessionLost, match=f"no answer within {session.tail_s:g} s"):  # was: no answer for ever
                await asyncio.wait_for(session.files(), session.tail_s + SLACK_S)  # the follower's heartbeat found it
            assert time.monotonic() - started < session.tail_s + SLACK_S
            with pytest.raises(SessionLost):  # the close, and the reaper behind it, do not wait
                await asyncio.wait_for(sessions.close(session.id), 1)
            deadline = time.monotonic() + LOSS_DEADLINE_S
            while Path(f"/proc/{worker}").exists():  # ended by Ray, though stopped
                assert time.monotonic() < deadline, "the stopped actor was not ended"
                await asyncio.sleep(1)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
            remove_what_the_killed_actor_left(session.run_dir.name)
    end = read_record(session.run_dir).events[-1]
    assert (end.type, end.status) == ("run_end", "lost") and "no answer within" in (end.cause or "")


async def test_close_all_ends_within_its_bound_with_one_stopped_actor_among_healthy_ones(ray_sessions_cluster, tmp_path: Path) -> None:
    _, nodes = ray_sessions_cluster
    sessions = ray_session_manager(tmp_path / "runs", RayOpener({}, call_s=STOPPED_CALL_S))
    await sessions.__aenter__()
    stopped, healthy = await sessions.open(), await sessions.open()
    worker, _ = sandbox_owner(next(n for n in nodes if n.node_id == stopped.node))
    assert (await healthy.exec("mkdir -p output && echo saved > output/result.txt")).exit_code == 0
    os.kill(worker, signal.SIGSTOP)
    try:
        started = time.monotonic()
        await asyncio.wait_for(sessions.close_all(), CLOSE_BOUND_S + SLACK_S)  # was: for ever
        assert time.monotonic() - started < CLOSE_BOUND_S + SLACK_S
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
        remove_what_the_killed_actor_left(stopped.run_dir.name)
    assert stopped.lost is not None and "no answer within" in stopped.lost
    assert read_record(stopped.run_dir).events[-1].status == "lost"
    assert read_record(healthy.run_dir).events[-1].status == "ok"  # saved and brought back as on one machine
    assert (healthy.run_dir / "output" / "result.txt").read_text() == "saved\n"
