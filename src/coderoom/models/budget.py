"""A bound on model requests in flight across many runs (`coderoom batch --model-concurrency N`).

Why: a batch of N parallel jobs sends up to N requests at once, and a provider's rate limit
answers the excess with 429s that each job then retries on its own. With a budget, each model
request holds one of N slots while it is in flight (`GuardedModel`, the one place every HTTP
model's requests are issued, acquires it per attempt; the SDK's retry waits hold none).

Two kinds: `LocalBudget` (the jobs of one process share an asyncio semaphore) and, on a Ray
cluster, `SlotsBudget` over a `ModelSlots` actor that every node's jobs call (`batch.cluster`).
A slot is a lease: one whose holder vanished (its node was lost mid-request) is taken back
after `lease_s`, longer than a request may last (the whole-request deadline, CODEROOM_MODEL_TIMEOUT),
so a lost node cannot hold the batch's budget forever. Nothing here imports Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

LEASE_MARGIN_S = 60.0  # past the request deadline before a slot is taken back from its holder


class ModelBudget(Protocol):
    """Slots for model requests: `slot()` holds one for the length of a request."""

    def slot(self) -> contextlib.AbstractAsyncContextManager[None]: ...


class LocalBudget:
    """At most `limit` requests at once among the runs of this process (one event loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: asyncio.Semaphore | None = None

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._slots is None:  # made in the loop that uses it
            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            yield


class ModelSlots:
    """The slots themselves, as leases: a Ray actor on the driver's node (async, so that many
    `acquire` calls wait at once). `acquire` waits for a free slot and returns the lease's id;
    `release` frees it; a lease older than `lease_s` is free again."""

    def __init__(self, limit: int, lease_s: float) -> None:
        self.limit, self.lease_s = limit, lease_s
        self._leases: dict[int, float] = {}  # id -> when it expires
        self._ids = itertools.count(1)
        self._changed: asyncio.Condition | None = None
        self.peak = 0

    async def acquire(self) -> int:
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            while True:
                now = time.monotonic()
                for lease, expires in list(self._leases.items()):
                    if expires <= now:
                        del self._leases[lease]
                if len(self._leases) < self.limit:
                    lease = next(self._ids)
                    self._leases[lease] = now + self.lease_s
                    self.peak = max(self.peak, len(self._leases))
                    return lease
                soonest = min(self._leases.values())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), max(0.0, soonest - now))

    async def release(self, lease: int) -> None:
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            self._leases.pop(lease, None)
            self._changed.notify_all()


class RemoteMethod(Protocol):
    def remote(self, *args: Any) -> Any: ...


class ModelSlotsHandle(Protocol):
    """A Ray actor handle of `ModelSlots` (its methods called with `.remote`, awaited)."""

    acquire: RemoteMethod
    release: RemoteMethod


class SlotsBudget:
    """A budget whose slots are `ModelSlots`' (an actor shared by every job of a cluster batch)."""

    def __init__(self, slots: ModelSlotsHandle) -> None:
        self._slots = slots

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        lease = await self._slots.acquire.remote()
        try:
            yield
        finally:
            await asyncio.shield(self._slots.release.remote(lease))


def lease_seconds(deadline_s: float) -> float:
    """How long a cluster slot is held at most: a request's whole-request deadline, and a margin."""
    return deadline_s + LEASE_MARGIN_S
