"""Attack R-B1 (docs/security.md, Ray live-session pass): two opens racing for the last room on the
cluster. Both used to see a free cpu (`busy_for`) and both asked Ray for an actor: the loser's
actor queued for OPEN_TIMEOUT_S (600 s) with its client waiting. The room is now taken atomically
(`cluster.placement.reserve`): one open gets it, the other is refused "no room" within the
opener's `busy_grace_s`, and nothing of the refused one is left holding room on the cluster.
The grace is cut from BUSY_GRACE_S (20 s) to GRACE_S: the loser is refused after its grace,
whatever it is; the winner's room is free at once and waits on no grace.

The cluster is Ray's one-machine multi-node `Cluster`: a head with no CPUs and two one-CPU nodes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from coderoom.errors import SandboxUnavailable
from coderoom.sandboxes.limits import Limits
from ray_cluster import live_actors

SLACK_S = 60  # over the grace, for 2 busy cores
GRACE_S = 5.0
RAY_NODES = 2  # one-CPU nodes, for `ray_sessions_cluster` (tests/conftest.py)


async def test_two_opens_racing_for_the_last_room_one_gets_it_and_the_other_is_refused(ray_sessions_cluster, tmp_path: Path) -> None:
    import ray

    from coderoom.service.ray_session import RayOpener

    opener = RayOpener({}, busy_grace_s=GRACE_S)

    async def open_one() -> Any:
        return await opener(model="offline", limits=Limits(cpus=1), runs_dir=tmp_path / "runs")

    first = await open_one()  # one node taken: one cpu left on the cluster
    started = time.monotonic()
    outcomes = await asyncio.wait_for(asyncio.gather(open_one(), open_one(), return_exceptions=True), GRACE_S + SLACK_S)
    assert time.monotonic() - started < GRACE_S + SLACK_S  # was: the loser queued for 600 s
    [won] = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
    [lost] = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert isinstance(lost, SandboxUnavailable) and "no room on the Ray cluster" in str(lost)
    assert won.node != first.node
    assert len(live_actors()) == 2  # the loser left no actor behind, queued or not
    await first.close()
    await won.close()
    assert live_actors() == []
    deadline = time.monotonic() + SLACK_S
    while ray.available_resources().get("CPU", 0) < 2:  # every room given back (no placement group left)
        assert time.monotonic() < deadline, ray.available_resources()
        await asyncio.sleep(0.5)
