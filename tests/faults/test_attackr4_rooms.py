"""Ray warm pool, placement and deadlines attack pass (docs/security.md, R-E): a session's room on
the cluster (its placement group, `cluster.placement`) is given back once, whatever way its
session ends, and never another session's.

The cluster is Ray's one-machine multi-node `Cluster` (`ray_sessions_cluster`, tests/conftest.py):
a head with no CPUs and two one-CPU nodes, so two sessions (cpus = 1) fill it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from coderoom.errors import CoderoomError, SessionLost
from coderoom.sandboxes.limits import Limits
from ray_cluster import descendants, left_on_the_node, live_actors

RAY_NODES = 2  # one-CPU nodes (`ray_sessions_cluster`, tests/conftest.py)
SLACK_S = 120  # for 2 busy cores
CYCLES = 4


def groups(state: str) -> list[str]:
    """The cluster's placement groups in `state` (CREATED, PENDING, REMOVED...), by id."""
    from ray.util.placement_group import placement_group_table

    return [group_id for group_id, group in placement_group_table().items() if group["state"] == state]


async def every_room_given_back() -> None:
    """No placement group holds room, and both nodes' cpus are free again (Ray frees them a little
    after a group is removed)."""
    import ray

    deadline = time.monotonic() + SLACK_S
    while groups("CREATED") or groups("PENDING") or ray.available_resources().get("CPU", 0) < RAY_NODES:
        assert time.monotonic() < deadline, (groups("CREATED"), groups("PENDING"), ray.available_resources())
        await asyncio.sleep(0.5)


async def open_one(runs: Path) -> Any:
    from coderoom.service.ray_session import RayOpener

    return await RayOpener({})(model="offline", limits=Limits(cpus=1), runs_dir=runs)


def actor_worker(node: Any) -> int:
    """The session actor's worker process on `node` (the parent of its bwrap)."""
    found = descendants(node.all_processes["raylet"][0].process.pid)
    sandboxes = {pid for pid, name in found.items() if name == "bwrap"}
    parents = {int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in sandboxes}
    [worker] = parents - sandboxes
    return worker


async def test_sessions_opened_and_closed_fast_leave_no_placement_group_holding_room(ray_sessions_cluster, tmp_path: Path) -> None:
    for _ in range(CYCLES):
        first, second = await asyncio.gather(open_one(tmp_path / "runs"), open_one(tmp_path / "runs"))
        await asyncio.gather(first.close(), second.close())
    await every_room_given_back()
    assert live_actors() == []


async def test_a_lost_session_gives_back_its_own_room_once_and_never_the_next_sessions(ray_sessions_cluster, tmp_path: Path) -> None:
    _, nodes = ray_sessions_cluster
    lost, kept = await open_one(tmp_path / "runs"), await open_one(tmp_path / "runs")
    worker = actor_worker(next(node for node in nodes if node.node_id == lost.node))
    os.kill(worker, signal.SIGKILL)
    with pytest.raises(SessionLost):
        await asyncio.wait_for(lost.exec("true"), SLACK_S)
    with contextlib.suppress(SessionLost):
        await lost.close()  # a second end of the lost session: its room is not given back twice
    for folder in left_on_the_node(lost.run_dir.name):
        shutil.rmtree(folder, ignore_errors=True)
    successor = await asyncio.wait_for(open_one(tmp_path / "runs"), SLACK_S)  # in the room given back
    assert successor.node == lost.node
    await asyncio.sleep(2)
    assert len(groups("CREATED")) == 2  # the successor's and the kept session's rooms both still held
    assert (await successor.exec("true")).exit_code == 0 and (await kept.exec("true")).exit_code == 0
    await asyncio.gather(successor.close(), kept.close())
    await every_room_given_back()


async def test_a_close_that_fails_on_its_node_still_ends_the_actor_and_gives_its_room_back(ray_sessions_cluster, tmp_path: Path) -> None:
    session = await open_one(tmp_path / "runs")
    [folder] = left_on_the_node(session.run_dir.name)
    shutil.rmtree(folder / session.run_dir.name)  # the node's disk loses the run folder (a temp cleaner, a full disk)
    with contextlib.suppress(CoderoomError):  # the close says what went wrong
        await asyncio.wait_for(session.close(keep_unsaved=False), SLACK_S)
    await every_room_given_back()  # was: the actor left alive, its node's cpu held for the server's life
    assert live_actors() == []
    shutil.rmtree(folder, ignore_errors=True)
