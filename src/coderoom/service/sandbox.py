"""`LiveSandbox`: one started sandbox session kept open across requests, for a live session or
the warm pool, closed (and deleted) exactly once.

A one-shot run holds its sandbox in an `async with open_session(...)` block; a live session's
sandbox outlives every request, so the same context manager is entered on an exit stack here and
left by `aclose` (from whichever task closes the session: its client, the idle reaper, shutdown).
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

from agents.sandbox import Manifest

from ..interrupts import finish_uncancelled
from ..sandboxes.base import SandboxBackend
from ..sandboxes.session import open_session
from ..sandboxes.spec import SandboxSpec
from ..tools.python_kernel import KernelClient, KernelError, cell_timeout

HEALTH_CHECK_S = 5.0  # `answers`: a sandbox that takes longer to say it is alive is not handed out

WARM_IMPORTS = "for _m in ('numpy', 'pandas', 'matplotlib.pyplot'):\n    __import__(_m)\ndel _m\n"
"""What a warm kernel has imported before its session's first cell (the pool's whole point).
Imported, not bound: the cell leaves no name behind, so a session's cells need their own
imports exactly as in a kernel that was not warmed (and as its notebook export and rerun do);
matplotlib's backend is the kernel's own default (Agg)."""


class LiveSandbox:
    """A started SDK sandbox session (`session`) with its spec; `aclose` is idempotent."""

    def __init__(self, spec: SandboxSpec, session: Any, stack: AsyncExitStack) -> None:
        self.spec = spec
        self.session = session
        self._stack = stack
        self._closed = False

    @classmethod
    async def start(cls, spec: SandboxSpec, backend: SandboxBackend | None = None) -> LiveSandbox:
        """`backend`: an object to use instead of the registry's (tests hand in the fake)."""
        stack = AsyncExitStack()
        try:
            session = await stack.enter_async_context(open_session(spec, Manifest(), backend=backend))
        except BaseException:
            await finish_uncancelled(stack.aclose())
            raise
        return cls(spec, session, stack)

    async def warm(self) -> None:
        """Start the run_python kernel and do WARM_IMPORTS in it, then number cells from 1 again,
        so the session's first cell is cell 1 and costs what a warm cell costs."""
        client = KernelClient(self.session)
        result = await client.run(WARM_IMPORTS, cell_timeout(self.spec.limits.timeout))
        if result.reply.status != "ok":
            raise KernelError(f"the warm-up imports failed: {(result.reply.error or result.reply.detail)[-500:]}")
        client.state.cells = 0

    async def answers(self) -> bool:
        """Whether this sandbox still runs commands and its warm kernel answers with its state
        intact, within HEALTH_CHECK_S (a few ms when it does): something outside may have killed
        its processes since it was warmed."""
        try:
            async with asyncio.timeout(HEALTH_CHECK_S):
                return await KernelClient(self.session).answers()
        except Exception:  # a dead launcher or container fails its exec: not alive either
            return False

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await finish_uncancelled(self._stack.aclose())


async def close_all(sandboxes: list[LiveSandbox]) -> None:
    """Close several at once (shutdown): one failing close does not keep the others open."""
    await asyncio.gather(*(s.aclose() for s in sandboxes), return_exceptions=True)
