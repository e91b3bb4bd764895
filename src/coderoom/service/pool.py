"""`WarmPool`: sandboxes started ahead of need, each with a kernel that has numpy, pandas and
matplotlib imported, so a new session's first cell costs what a warm cell costs.

Rules: a pooled sandbox is handed to one session only and never comes back (`claim` removes it;
the session closes it); the pool starts a replacement at once. A sandbox nobody claimed within
`max_idle_s` is closed and replaced (recycled), so none runs on for days with whatever state
its start left. Only a session whose spec equals the pool's (backend, limits, options) gets a
pooled sandbox; another gets None and starts its own. `close` (shutdown) closes every pooled
sandbox and any being started.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from ..sandboxes.base import SandboxBackend
from ..sandboxes.spec import SandboxSpec
from .sandbox import LiveSandbox, close_all

POOL_SIZE = 2  # warm sandboxes kept ready, by default
POOL_MAX_IDLE_S = 600.0  # an unclaimed warm sandbox is recycled after this long
START_RETRY_S = 5.0  # after a failed start, the pool waits this long before the next try


@dataclass
class _Ready:
    live: LiveSandbox
    since: float


class WarmPool:
    """`await pool.start()`, then `await pool.claim(spec)` per session; `await pool.close()`."""

    def __init__(
        self, size: int = POOL_SIZE, max_idle_s: float = POOL_MAX_IDLE_S, spec: SandboxSpec | None = None,
        backend: SandboxBackend | None = None,
    ) -> None:
        if size < 1 or max_idle_s <= 0:
            raise ValueError("a pool needs size >= 1 and max_idle_s > 0")
        self.size = size
        self.max_idle_s = max_idle_s
        self.spec = spec or SandboxSpec()
        self.backend = backend  # an object instead of the registry's (see `registry.backend_for`)
        self.claimed = 0
        self.recycled = 0
        self.last_error: str | None = None
        self._ready: list[_Ready] = []
        self._starting: set[LiveSandbox] = set()
        self._wake = asyncio.Event()
        self._changed = asyncio.Event()
        self._filler: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def ready(self) -> int:
        return len(self._ready)

    async def start(self) -> None:
        if self._filler is None:
            self._filler = asyncio.create_task(self._fill(), name="coderoom-warm-pool")

    async def wait_ready(self, timeout: float) -> None:
        """Until `size` sandboxes are warm (TimeoutError after `timeout` s)."""
        async with asyncio.timeout(timeout):
            while len(self._ready) < self.size:
                self._changed.clear()
                await self._changed.wait()

    def matches(self, spec: SandboxSpec) -> bool:
        return spec.model_dump() == self.spec.model_dump()

    async def claim(self, spec: SandboxSpec) -> LiveSandbox | None:
        """A warm sandbox for `spec`, now, or None (none ready, or another spec). Never twice."""
        if self._closed or not self.matches(spec) or not self._ready:
            return None
        entry = self._ready.pop(0)
        self.claimed += 1
        self._wake.set()
        return entry.live

    async def close(self) -> None:
        self._closed = True
        if self._filler is not None:
            self._filler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._filler
        ready, self._ready = [e.live for e in self._ready], []
        await close_all(ready + list(self._starting))

    async def _fill(self) -> None:
        while not self._closed:
            now = time.monotonic()
            for entry in [e for e in self._ready if now - e.since > self.max_idle_s]:
                self._ready.remove(entry)
                self.recycled += 1
                await entry.live.aclose()
            if len(self._ready) < self.size:
                if not await self._start_one():
                    await asyncio.sleep(START_RETRY_S)
                continue
            oldest = min(e.since for e in self._ready)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.05, oldest + self.max_idle_s - time.monotonic())):
                    await self._wake.wait()

    async def _start_one(self) -> bool:
        live: LiveSandbox | None = None
        try:
            live = await LiveSandbox.start(self.spec, self.backend)
            self._starting.add(live)
            await live.warm()
        except Exception as exc:
            self.last_error = f"{type(exc).__name__}: {exc}"[:500]
            if live is not None:
                self._starting.discard(live)
                await live.aclose()
            return False
        self._starting.discard(live)
        self._ready.append(_Ready(live, time.monotonic()))
        self._changed.set()
        return True
