"""Ray warm pool, placement and deadlines attack pass (docs/security.md, R-E): the warm pool per
node (`service.ray_pool`) hands a warm sandbox only to a session of the server's own settings, and
a warm actor that stopped answering (SIGSTOP, a stuck event loop) costs a claim its health check,
no more.

The cluster is Ray's one-machine multi-node `Cluster` (`ray_pool_cluster`, tests/conftest.py):
a head with no CPUs and one one-CPU node, holding one warm actor. Sandboxes are real (local).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.spec import EnvironmentSpec
from ray_cluster import descendants, live_actors

RAY_NODES = 1  # for `ray_pool_cluster` (tests/conftest.py)
FILL_S = 400  # a node warming numpy, pandas and matplotlib on 2 busy cores
LIMITS = Limits(cpus=1)


def warm_actor_worker(node: Any) -> int:
    """The warm actor's worker process on `node` (the parent of its sandbox's outer bwrap)."""
    found = descendants(node.all_processes["raylet"][0].process.pid)
    sandboxes = {pid for pid, name in found.items() if name == "bwrap"}
    parents = {int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in sandboxes}
    [worker] = parents - sandboxes
    return worker


async def test_the_warm_pool_hands_nothing_to_other_settings_and_a_stopped_warm_actor_costs_only_its_check(ray_pool_cluster, tmp_path: Path) -> None:
    from coderoom.service.ray_pool import ANSWER_S, RETIRE_S, RayWarmPool, session_spec

    _, [node] = ray_pool_cluster
    pool = RayWarmPool(1, 600.0, session_spec("local", LIMITS, None))
    await pool.start()
    worker = 0
    try:
        await pool.wait_ready(FILL_S)
        others = [
            session_spec("local", Limits(cpus=1, network=True), None),  # network the server's sandboxes have not
            session_spec("local", Limits(cpus=1, timeout=LIMITS.timeout * 10), None),  # a longer wall clock
            session_spec("local", Limits(cpus=1, memory=LIMITS.memory * 2), None),  # more memory
            session_spec("docker", LIMITS, None),  # another backend
            session_spec("local", LIMITS, EnvironmentSpec(packages=["canary-pkg-r4"])),  # declared packages
        ]
        for spec in others:
            assert await pool.claim(spec) is None
        [node_pool] = pool.nodes.values()
        assert (node_pool.ready, node_pool.claimed) == (1, 0)  # the warm one untouched by them

        worker = warm_actor_worker(node)
        os.kill(worker, signal.SIGSTOP)  # alive to Ray, answering nothing
        started = time.monotonic()
        assert await pool.claim(pool.spec) is None  # never handed out
        took = time.monotonic() - started
        assert took < ANSWER_S + RETIRE_S / 2, took  # was: ANSWER_S, then RETIRE_S more asking it to retire
        assert node_pool.dead == 1
    finally:
        if worker:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
        await pool.close()
    deadline = time.monotonic() + 120
    while live_actors():
        assert time.monotonic() < deadline, live_actors()
        await asyncio.sleep(0.5)
