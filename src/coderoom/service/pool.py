"""`WarmPool`: sandboxes started ahead of need, each with a kernel that has numpy, pandas and
matplotlib imported, so a new session's first cell costs what a warm cell costs.

The rules hold for every warm pool (`Refilled`): this machine's (`WarmPool`) and the one per
node of a Ray cluster (`ray_pool.RayWarmPool`). A pooled sandbox is handed to one session only
and never comes back (`claim` removes it; the session closes it); the pool starts a replacement at once. Before it is handed out, a
sandbox is checked (its kernel answers, state intact: `LiveSandbox.answers`); a dead one is
closed and replaced, and the session gets the next one or None (it then starts its own), never a
sandbox whose first cell would say "state lost". A sandbox nobody claimed within
`max_idle_s` is closed and replaced (recycled), so none runs on for days with whatever state
its start left. Only a session whose spec equals the pool's (backend, limits, options) gets a
pooled sandbox; another gets None and starts its own. `close` (shutdown) closes every pooled
sandbox and any being started.

A warm-up that fails is logged once, with its cause, until one succeeds again (a warning on stderr, which `serve` and `mcp`
show) and kept in `status()`, and retried after a delay that doubles with each failure in a row,
from `retry_base_s` up to `retry_max_s`: a pool that cannot warm up (a limit too small for its
imports, a missing image) says why and does not restart a sandbox every few seconds forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ..hostile.text import terminal_safe
from ..sandboxes.base import SandboxBackend
from ..sandboxes.spec import SandboxSpec
from .sandbox import LiveSandbox, close_all

POOL_SIZE = 2  # warm sandboxes kept ready, by default
POOL_MAX_IDLE_S = 600.0  # an unclaimed warm sandbox is recycled after this long
RETRY_BASE_S = 5.0  # after a first failed warm-up, the pool waits this long before the next try
RETRY_MAX_S = 600.0  # ... and never longer than this, however many failed in a row

log = logging.getLogger(__name__)


T = TypeVar("T")


class NotNow(Exception):
    """From `_make`: nothing is wrong, there is no room for one more yet (a full Ray node); tried
    again after `retry_base_s`, not counted as a failure nor logged."""


class Pool(Protocol):
    """What a server holds of its warm pool, whichever it is (`WarmPool`, `ray_pool.RayWarmPool`):
    started, shown (`status`), closed at shutdown."""

    async def start(self) -> None: ...

    def status(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class Claims(Protocol):
    """What `Session.open` takes a warm sandbox from: this machine's pool, or on a Ray node the
    sandbox its actor warmed (`on_node`)."""

    async def claim(self, spec: SandboxSpec) -> LiveSandbox | None: ...


@dataclass
class _Ready(Generic[T]):
    item: T
    since: float


class Refilled(Generic[T]):
    """The pool's rules (the module's docstring), whatever is kept warm: a `LiveSandbox` here
    (`WarmPool`), a session actor on one Ray node (`ray_pool.NodePool`). A subclass says how one
    is started and warmed (`_make`: it cleans up what it started when it fails or is
    cancelled), checked (`_alive`) and ended (`_discard`)."""

    what = "a warm sandbox"  # in the log's lines

    def __init__(
        self, size: int, max_idle_s: float, retry_base_s: float = RETRY_BASE_S, retry_max_s: float = RETRY_MAX_S,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        """`sleep`: how the pool waits between failed warm-ups (tests pass a clock of their own)."""
        if size < 1 or max_idle_s <= 0 or not 0 < retry_base_s <= retry_max_s:
            raise ValueError("a pool needs size >= 1, max_idle_s > 0 and 0 < retry_base_s <= retry_max_s")
        self.size = size
        self.max_idle_s = max_idle_s
        self.claimed = 0
        self.recycled = 0
        self.dead = 0  # warm ones found dead at claim, ended and replaced
        self.last_error: str | None = None
        self.failures = 0  # failed warm-ups in a row (0 after one succeeds)
        self.retry_at: float | None = None  # monotonic time of the next try after a failure
        self._retry_base_s, self._retry_max_s, self._sleep = retry_base_s, retry_max_s, sleep
        self._ready: list[_Ready[T]] = []
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._filler: asyncio.Task[None] | None = None
        self._closed = False

    async def _make(self) -> T:
        raise NotImplementedError

    async def _alive(self, item: T) -> bool:
        raise NotImplementedError

    async def _discard(self, items: list[T]) -> None:
        raise NotImplementedError

    @property
    def ready(self) -> int:
        return len(self._ready)

    async def start(self) -> None:
        if self._filler is None:
            self._filler = asyncio.create_task(self._fill(), name="coderoom-warm-pool")

    async def wait_ready(self, timeout: float) -> None:
        """Until `size` are warm (TimeoutError after `timeout` s)."""
        async with asyncio.timeout(timeout):
            while len(self._ready) < self.size:
                self._changed.clear()
                await self._changed.wait()

    def status(self) -> dict[str, Any]:
        """What the pool is doing, for a server to show: counts, and why warm-up fails if it does."""
        return {
            "size": self.size, "ready": self.ready, "claimed": self.claimed, "recycled": self.recycled,
            "dead": self.dead, "failures": self.failures, "last_error": self.last_error,
            "retry_in_s": None if self.retry_at is None else round(max(0.0, self.retry_at - time.monotonic()), 1),
        }  # fmt: skip

    def retry_delay(self) -> float:
        """The wait after `failures` failed warm-ups in a row: doubling from the base, capped."""
        return min(self._retry_max_s, self._retry_base_s * 2 ** min(self.failures - 1, 62))

    async def take(self) -> T | None:
        """A warm one that answers, now, or None. Never twice: each is taken out of the pool
        before it is checked; a dead one is ended and replaced."""
        while self._ready and not self._closed:
            entry = self._ready.pop(0)
            self._wake.set()
            try:
                alive = await self._alive(entry.item)
            except BaseException:  # the claim cancelled (its client went): not left running unowned
                await self._discard([entry.item])
                raise
            if alive:
                self.claimed += 1
                return entry.item
            self.dead += 1
            log.warning("warm pool: %s had died (it did not answer); ended, a new one is started", self.what)
            await self._discard([entry.item])
        return None

    async def close(self) -> None:
        """End every warm one, and the one being started (its `_make`, cancelled, ends it)."""
        self._closed = True
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
        ready, self._ready = [e.item for e in self._ready], []
        await self._discard(ready)

    async def _fill(self) -> None:
        while not self._closed:
            now = time.monotonic()
            for entry in [e for e in self._ready if now - e.since > self.max_idle_s]:
                self._ready.remove(entry)
                self.recycled += 1
                await self._discard([entry.item])
            if len(self._ready) < self.size:
                delay = await self._start_one()
                if delay is not None:
                    self.retry_at = time.monotonic() + delay
                    await self._sleep(delay)
                    self.retry_at = None
                continue
            oldest = min(e.since for e in self._ready)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.05, oldest + self.max_idle_s - time.monotonic())):
                    await self._wake.wait()

    async def _start_one(self) -> float | None:
        """Start one; None when it is warm, else how long to wait before the next try."""
        try:
            item = await self._make()
        except NotNow:
            return self._retry_base_s
        except Exception as exc:
            self._failed(f"{type(exc).__name__}: {exc}")
            return self.retry_delay()
        if self.failures:
            log.warning("warm pool: warm-up works again after %d failed tries", self.failures)
        self.failures, self.last_error = 0, None
        self._ready.append(_Ready(item, time.monotonic()))
        self._changed.set()
        return None

    def _failed(self, cause: str) -> None:
        """Count a failed warm-up; log the first of a run of failures with its cause, not every retry
        (the text of a cause varies between tries; `status` has the latest). The cause can quote the
        sandbox (a warm-up's traceback), so it is one line, bounded and terminal-safe."""
        cause = terminal_safe(" ".join(cause.split()))
        if len(cause) > 500:
            cause = f"{cause[:200]} ... {cause[-300:]}"
        self.failures += 1
        self.last_error = cause
        if self.failures == 1:
            log.warning(
                "warm pool: %s could not be started (%s); retrying after %g s, then less and less often",
                self.what, cause, self.retry_delay(),
            )


class WarmPool(Refilled[LiveSandbox]):
    """`await pool.start()`, then `await pool.claim(spec)` per session; `await pool.close()`."""

    def __init__(
        self, size: int = POOL_SIZE, max_idle_s: float = POOL_MAX_IDLE_S, spec: SandboxSpec | None = None,
        backend: SandboxBackend | None = None, retry_base_s: float = RETRY_BASE_S, retry_max_s: float = RETRY_MAX_S,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        super().__init__(size, max_idle_s, retry_base_s, retry_max_s, sleep)
        self.spec = spec or SandboxSpec()
        self.backend = backend  # an object instead of the registry's (see `registry.backend_for`)

    def matches(self, spec: SandboxSpec) -> bool:
        return spec.model_dump() == self.spec.model_dump()

    async def claim(self, spec: SandboxSpec) -> LiveSandbox | None:
        """A warm sandbox for `spec` that answers, now, or None (none ready or alive, or another
        spec)."""
        return await self.take() if self.matches(spec) else None

    async def _make(self) -> LiveSandbox:
        live = await LiveSandbox.start(self.spec, self.backend)
        try:
            await live.warm()
        except BaseException:  # failed, or cancelled by `close` while it warms
            await live.aclose()
            raise
        return live

    async def _alive(self, item: LiveSandbox) -> bool:
        return await item.answers()

    async def _discard(self, items: list[LiveSandbox]) -> None:
        await close_all(items)
