"""Room on the Ray cluster for one live session, taken atomically (attack R-B1, docs/security.md):
a placement group of one bundle (the session's cpus and memory), placed by Ray's GCS, which
places groups one at a time. Two opens racing for the last room cannot both get it (as they
could when each checked the free resources, then asked for an actor: the loser's actor queued
for OPEN_TIMEOUT_S); the loser's group stays pending, and is removed when `reserve`'s wait ends.
The same holds for any other driver of the cluster (a second server, a batch's tasks).

A reservation can be pinned to one node (`node`: the warm pool per node, through the node-id
label Ray gives every node), and is released (`Reservation.release`) when its actor ends, or
the room stays taken. A driver that dies releases its groups with it (Ray's job lifetime).

Nothing here imports Ray at module level (see `connect`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ..sandboxes.limits import Limits

NODE_LABEL = "ray.io/node-id"  # the label Ray 2.60 sets on every node: its id


@dataclass
class Reservation:
    """One session's room on one node (a placement group's bundle 0)."""

    group: Any
    node: str
    _released: bool = field(default=False, repr=False)

    def options(self, limits: Limits) -> dict[str, Any]:
        """The actor options that place an actor of `limits` in this room, never elsewhere."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=0)
        return {"num_cpus": limits.cpus, "memory": limits.memory, "scheduling_strategy": strategy}

    def release(self) -> None:
        """Give the room back (idempotent; a group whose node is gone is removed as well)."""
        if self._released:
            return
        self._released = True
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(self.group)
        except Exception:  # the cluster gone with it (shutdown): nothing left to give back
            pass


async def reserve(limits: Limits, wait_s: float, node: str | None = None) -> Reservation | None:
    """Room for a session of `limits` (on `node` when given), taken within `wait_s`, or None
    (nothing of it kept: the pending group is removed)."""
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    bundle = {"CPU": float(limits.cpus), "memory": float(limits.memory)}
    selector = [{NODE_LABEL: node}] if node is not None else None
    group = placement_group([bundle], strategy="STRICT_PACK", bundle_label_selector=selector)
    try:
        await asyncio.wait_for(_awaited(group.ready()), wait_s)
    except TimeoutError:
        remove_placement_group(group)
        return None
    except BaseException:  # cancelled (the client went), the cluster failing: nothing kept either
        remove_placement_group(group)
        raise
    reservation = Reservation(group, node or "")
    try:
        placed = await asyncio.to_thread(placement_group_table, group)
        reservation.node = str(placed["bundles_to_node_id"][0])
    except BaseException:
        reservation.release()
        raise
    return reservation


def free_cpus() -> dict[str, float]:
    """The cpus free now on each live node, by node id (which node a warm session is taken
    from first). Ray 2.60 has no public call for it without its dashboard; without it, {}."""
    try:
        from ray._private.state import available_resources_per_node

        return {node: float(free.get("CPU", 0)) for node, free in available_resources_per_node().items()}
    except Exception:
        return {}


async def _awaited(ref: Any) -> Any:
    return await ref
