"""Attack pass T-A (2026-12-07) on `cluster.progress.LazyBox`: the driver's `ProgressBox` actor,
made at the first ask (RayJobs at the first run with listeners, RayOpener at a session's first
ask), its `claim` sent before anyone else has the handle (`cluster.driver_only`).

T-A4: many first asks at once (MCP `run_job`s and session asks arriving together, each in its
own thread) make one box and one token; a node holding that handle (a job's task) can neither
claim the token nor open a place of its own, while the place the driver opened takes its report.
Run against the shared Ray head (tests/conftest.py), this process joined as `coderoom mcp --ray` joins it.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import ray_cluster
from ray_cluster import Head, live_actors


@pytest.fixture(scope="module")
def joined(shared_ray_head: Head) -> Iterator[Head]:
    with ray_cluster.joined(shared_ray_head.address, by_value=__name__):
        yield shared_ray_head


def hostile_node(box: Any) -> list[Any]:
    """A job's task that turns on the box it was handed: claims it, opens a key of its own and
    puts there and under the driver's key."""
    import ray

    claimed = ray.get(box.claim.remote())
    ray.get(box.open.remote("node-made", None))
    ray.get(box.open.remote("node-made", "guessed-token"))
    ray.get(box.put.remote("node-made", "flood"))
    ray.get(box.put.remote("driver-job", "from the node"))
    return [claimed]


def test_t_a4_first_asks_at_once_make_one_box_whose_token_the_nodes_never_get(joined: Head) -> None:
    import ray

    from coderoom.cluster.progress import LazyBox

    before = set(live_actors())
    lazy = LazyBox(ray)
    with ThreadPoolExecutor(16) as pool:
        made = list(pool.map(lambda _: lazy(), range(16)))
    boxes = {box._actor_id.hex() for box, _ in made}
    tokens = {id(token) for _, token in made}
    assert len(boxes) == 1 and len(tokens) == 1, "two first asks made two boxes"
    assert len(set(live_actors()) - before) == 1
    box, token = made[0]
    ray.get(box.open.remote("driver-job", token))
    assert ray.get(ray.remote(hostile_node).remote(box)) == [None]  # the claim was the driver's, sent first
    assert ray.get(box.take.remote("node-made")) == []  # no place of the node's making
    assert ray.get(box.take.remote("driver-job")) == ["from the node"]  # the driver's place works
    ray.kill(box)
