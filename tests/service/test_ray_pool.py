"""A warm pool per node for `--ray` sessions (`serve --ray --pool N`, `service.ray_pool`): each node
keeps N session actors whose sandbox and kernel are started, pinned to it; an open takes one (from
the node with the most free cpus) and the node's pool refills; a warm actor that died is never
handed out; a node that leaves loses its pool without an error and one that joins gets one; the
pool's close leaves no actor, sandbox or temporary folder on any node.

The cluster is Ray's one-machine multi-node `Cluster` (`ray_cluster.multi_node_cluster`): a head
with no CPUs and two two-CPU nodes; each session takes one CPU, so a node holds its warm actor
and one session. Sandboxes are real (local backend).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from coderoom.record import read_record
from coderoom.sandboxes.limits import Limits
from ray_cluster import add_node, descendants, live_actors, lose_node, running

FILL_S = 300  # two nodes warming numpy, pandas and matplotlib on 2 busy cores
NODE_S = 180  # Ray's health checks calling a node dead, and the pool's next look
LIMITS = Limits(cpus=1)


RAY_NODES, RAY_NODE_CPUS = 2, 2  # for `ray_pool_cluster` (tests/conftest.py)


def warm_pool(size: int = 1) -> Any:
    from coderoom.service.ray_pool import RayWarmPool, session_spec

    return RayWarmPool(size, 600.0, session_spec("local", LIMITS, None))


def manager(runs: Path, pool: Any) -> Any:
    from coderoom import SessionManager
    from coderoom.service.ray_session import RayOpener

    return SessionManager(model="offline", runs_dir=runs, limits=LIMITS, pool=pool, opener=RayOpener({}))


def alive_ids(nodes: list[Any]) -> set[str]:
    return {node.node_id for node in nodes if running(node)}


def sandboxes_on(nodes: list[Any]) -> list[int]:
    """The sandboxes running under the live nodes: their outer bwrap processes (bwrap forks once)."""
    found = [pid for node in nodes if running(node)
             for pid, name in descendants(node.all_processes["raylet"][0].process.pid).items() if name == "bwrap"]  # fmt: skip
    return [pid for pid in found if parent(pid) not in found]


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def session_folders() -> list[Path]:
    """The session actors' temporary runs folders on the nodes (`SessionActor`)."""
    return list(Path(os.environ["TMPDIR"]).glob("coderoom-session-*"))


def pooled(run_dir: Path) -> bool:
    [opened] = [event for event in read_record(run_dir).events if event.type == "session_open"]
    return bool(opened.pooled)


async def until(condition: Any, deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.5)


async def test_each_node_keeps_its_warm_sessions_and_an_open_takes_one_from_the_freest_node(ray_pool_cluster, tmp_path: Path) -> None:
    _, nodes = ray_pool_cluster
    pool = warm_pool()
    async with manager(tmp_path / "runs", pool) as sessions:
        await pool.start()
        await pool.wait_ready(FILL_S)
        assert set(pool.nodes) == alive_ids(nodes)  # one pool per node with room, none on the cpu-less head
        assert [p.ready for p in pool.nodes.values()] == [1, 1]
        assert len(sandboxes_on(nodes)) == 2  # started ahead of any session, one per node
        assert len(session_folders()) == 2

        first = await sessions.open()
        assert pooled(first.run_dir)  # its sandbox and kernel were the warm actor's
        assert "3003" in (await first.run_python("import numpy; print(numpy.arange(3).sum() * 1001)")).text
        await pool.wait_ready(FILL_S)  # the first node refilled: it holds its session and a warm one, no cpu free
        second = await sessions.open()
        assert pooled(second.run_dir)
        assert second.node != first.node  # taken from the node with a cpu free
        await sessions.close(first.id)
        await sessions.close(second.id)
    assert live_actors() == []
    assert sandboxes_on(nodes) == []
    assert session_folders() == []


async def test_a_pool_closed_while_its_actors_warm_up_leaves_nothing_on_the_nodes(ray_pool_cluster, tmp_path: Path) -> None:
    _, nodes = ray_pool_cluster
    before = set(session_folders())
    pool = warm_pool()
    async with manager(tmp_path / "runs", pool):
        await pool.start()
        await until(lambda: sandboxes_on(nodes), FILL_S, "no warm-up started")  # a sandbox started, its imports on the way
    # the manager's end closed the pool: the warm-ups were cancelled on their nodes
    assert live_actors() == []
    assert sandboxes_on(nodes) == []
    assert set(session_folders()) == before


async def test_a_warm_actor_that_died_is_never_handed_out(ray_pool_cluster, tmp_path: Path) -> None:
    import ray

    pool = warm_pool()
    async with manager(tmp_path / "runs", pool) as sessions:
        await pool.start()
        await pool.wait_ready(FILL_S)
        for node_pool in pool.nodes.values():  # every warm one's worker gone, as a crash leaves it
            ray.kill(node_pool._ready[0].item.actor, no_restart=True)
        session = await sessions.open()
        assert not pooled(session.run_dir)  # a sandbox of its own, not a dead one
        assert sum(node_pool.dead for node_pool in pool.nodes.values()) == 2
        assert "42" in (await session.run_python("print(6 * 7)")).text
        await sessions.close(session.id)
        await pool.wait_ready(FILL_S)  # replaced
    assert live_actors() == []


async def test_a_node_that_leaves_loses_its_pool_and_one_that_joins_gets_one(ray_pool_cluster, tmp_path: Path) -> None:
    started, nodes = ray_pool_cluster
    pool = warm_pool()
    async with manager(tmp_path / "runs", pool) as sessions:
        await pool.start()
        await pool.wait_ready(FILL_S)
        lost = nodes[0]
        lose_node(started, lost)
        await until(lambda: lost.node_id not in pool.nodes, NODE_S, "the lost node's pool was kept")
        session = await sessions.open()  # the next open works, from the node still there
        assert session.node != lost.node_id
        await sessions.close(session.id)

        joining = add_node(started, 2)
        nodes.append(joining)
        await until(lambda: joining.node_id in pool.nodes, NODE_S, "the node that joined got no pool")
        await pool.wait_ready(FILL_S)
        assert set(pool.nodes) == alive_ids(nodes)
    assert live_actors() == []
    assert sandboxes_on(nodes) == []
