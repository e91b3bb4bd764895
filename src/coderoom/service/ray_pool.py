"""A warm pool per node for `--ray` sessions (`serve --ray --pool N`, `mcp --ray --pool N`): on
every live node that can hold a session of the server's limits, N session actors
(`on_node.SessionActor`) that have already started their sandbox and kernel (`warm`) with the
server's sandbox spec, never a client's. Each holds its room on its node (`placement.reserve`
pinned to the node), so a warm actor is a session's cpus and memory taken ahead of need.

The rules are the one-machine pool's (`pool.Refilled`: one claim each, a health check before it
is handed out, refilled in the background, recycled past max_idle_s, failures logged once and
retried less and less often); a node full of sessions is waited for (`pool.NotNow`), not a
failure. Nodes are watched (NODE_WATCH_S): one that joins gets its pool, one that leaves loses
its pool (its actors ended without a word to the node, which is gone). A claim takes from the
node with the most free cpus first. `close` ends every warm actor, on every node.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from ..cluster.connect import nodes_holding
from ..cluster.placement import Reservation, free_cpus, reserve
from ..sandboxes.limits import Limits
from ..sandboxes.spec import EnvironmentSpec, SandboxSpec
from .on_node import SessionActor
from .pool import POOL_MAX_IDLE_S, POOL_SIZE, NotNow, Refilled
from .sandbox import HEALTH_CHECK_S
from .session import session_job

NODE_WATCH_S = 2.0  # how often the live nodes are listed (a node that joins or leaves)
ROOM_WAIT_S = 2.0  # a refill's wait for room on its node before it tries again later
WARM_TIMEOUT_S = 600.0  # for a node to start a warm actor's sandbox and kernel
RETIRE_S = 30.0  # for an unclaimed warm actor to close its sandbox before it is killed
ANSWER_S = HEALTH_CHECK_S + 5.0  # the health check on the node, and the call's way there and back


def session_spec(sandbox: str, limits: Limits, environment: EnvironmentSpec | None) -> SandboxSpec:
    """The sandbox spec a session of these settings runs (as its node's `Session.open` makes it):
    what the pool's spec is compared with."""
    job = session_job(name="session", model=None, sandbox=sandbox, limits=limits, instructions="", environment=environment)
    return job.sandbox


@dataclass(frozen=True)
class WarmActor:
    """A session actor on its node, its sandbox warm, holding its room there."""

    actor: Any
    room: Reservation


class NodePool(Refilled[WarmActor]):
    """The warm actors of one node."""

    def __init__(self, node: str, actor_class: Any, spec: SandboxSpec, size: int, max_idle_s: float) -> None:
        super().__init__(size, max_idle_s)
        self.node = node
        self.what = f"a warm session actor on node {node[:12]}"
        self.gone = False  # the node left the cluster: its actors are killed, not asked to close
        self._actor_class, self._spec = actor_class, spec
        # id()s of warm actors that gave no answer to their health check (stopped, stuck): killed,
        # not asked to retire, which kept the claim waiting RETIRE_S more for each (attack R-E4)
        self._silent: set[int] = set()

    async def _make(self) -> WarmActor:
        room = await reserve(self._spec.limits, ROOM_WAIT_S, node=self.node)
        if room is None:
            raise NotNow
        actor = self._actor_class.options(**room.options(self._spec.limits), max_restarts=0, max_task_retries=0).remote()
        warm = WarmActor(actor, room)
        warming = actor.warm.remote(self._spec)
        try:
            await asyncio.wait_for(_awaited(warming), WARM_TIMEOUT_S)
        except BaseException:  # failed, timed out, or the pool closed meanwhile
            await self._stop(warming)
            await self._discard([warm])
            raise
        return warm

    async def _stop(self, warming: Any) -> None:
        """A warm-up cut short: cancelled on the node, where it closes what it had started (a
        sandbox killed with its actor would leave its folder on the node)."""
        import ray

        if self.gone:
            return
        with contextlib.suppress(Exception):
            ray.cancel(warming)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(_awaited(warming), RETIRE_S)

    async def _alive(self, item: WarmActor) -> bool:
        try:
            return bool(await asyncio.wait_for(_awaited(item.actor.answers.remote()), ANSWER_S))
        except TimeoutError:  # stopped or stuck: it would not retire either
            self._silent.add(id(item))
            return False
        except Exception:  # its node gone, its worker killed, its sandbox failing
            return False

    async def _discard(self, items: list[WarmActor]) -> None:
        await asyncio.gather(*(self._end(item) for item in items))

    async def _end(self, item: WarmActor) -> None:
        import ray

        silent = id(item) in self._silent
        self._silent.discard(id(item))
        if not (self.gone or silent):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_awaited(item.actor.retire.remote()), RETIRE_S)
        with contextlib.suppress(Exception):
            ray.kill(item.actor, no_restart=True)
        item.room.release()


class RayWarmPool:
    """`await pool.start()`, then `await pool.claim(spec)` per session (`ray_session.RayOpener`);
    `await pool.close()`. `size` warm actors per node."""

    def __init__(self, size: int = POOL_SIZE, max_idle_s: float = POOL_MAX_IDLE_S, spec: SandboxSpec | None = None) -> None:
        if size < 1 or max_idle_s <= 0:
            raise ValueError("a pool needs size >= 1 and max_idle_s > 0")
        self.size, self.max_idle_s = size, max_idle_s
        self.spec = spec or session_spec("local", Limits(), None)
        self.nodes: dict[str, NodePool] = {}
        self._watcher: asyncio.Task[None] | None = None
        self._actor_class: Any = None
        self._closed = False

    def matches(self, spec: SandboxSpec) -> bool:
        return spec.model_dump() == self.spec.model_dump()

    async def start(self) -> None:
        if self._watcher is None:
            import ray

            self._actor_class = ray.remote(SessionActor)
            await self.watch()
            self._watcher = asyncio.create_task(self._watch(), name="coderoom-ray-warm-pool")

    async def watch(self) -> None:
        """A pool for each live node that can hold a session; none for a node that left."""
        alive = await asyncio.to_thread(nodes_holding, self.spec.limits)
        if self._closed:
            return
        for node in sorted(alive - self.nodes.keys()):
            pool = self.nodes[node] = NodePool(node, self._actor_class, self.spec, self.size, self.max_idle_s)
            await pool.start()
        for node in self.nodes.keys() - alive:
            pool = self.nodes.pop(node)
            pool.gone = True
            await pool.close()

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(NODE_WATCH_S)
            with contextlib.suppress(Exception):  # a GCS that does not answer now: asked again next time
                await self.watch()

    async def wait_ready(self, timeout: float) -> None:
        """Until every node's pool has `size` warm (TimeoutError after `timeout` s)."""
        async with asyncio.timeout(timeout):
            for pool in list(self.nodes.values()):
                await pool.wait_ready(timeout)

    async def claim(self, spec: SandboxSpec) -> WarmActor | None:
        """A warm actor for `spec` that answers, from the node with the most free cpus that has
        one, or None (none alive anywhere, or another spec)."""
        if not self.matches(spec) or self._closed:
            return None
        free = await asyncio.to_thread(free_cpus)
        for node in sorted(self.nodes, key=lambda node: free.get(node, 0.0), reverse=True):
            pool = self.nodes.get(node)
            warm = await pool.take() if pool is not None else None
            if warm is not None:
                return warm
        return None

    def status(self) -> dict[str, Any]:
        """Per node (its id's first 12 characters), what its pool is doing (`Refilled.status`)."""
        return {
            "size": self.size, "per": "node", "ready": sum(pool.ready for pool in self.nodes.values()),
            "nodes": {node[:12]: pool.status() for node, pool in self.nodes.items()},
        }  # fmt: skip

    async def close(self) -> None:
        """Every warm actor ended, on every node (and the ones being started)."""
        self._closed = True
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        pools, self.nodes = list(self.nodes.values()), {}
        await asyncio.gather(*(pool.close() for pool in pools), return_exceptions=True)


async def _awaited(ref: Any) -> Any:
    return await ref
