"""`LiveSandbox`: one started sandbox session kept open across requests, for a live session or
the warm pool, closed (and deleted) exactly once.

A live session's sandbox outlives every request: `HeldSession` holds `open_session`'s block open
until `aclose` (from whichever task closes the session: its client, the idle reaper, shutdown).
"""

from __future__ import annotations

import asyncio

from ..sandboxes.session import HeldSession
from ..tools.python_kernel import KernelClient, KernelError, cell_timeout

HEALTH_CHECK_S = 5.0  # `answers`: a sandbox that takes longer to say it is alive is not handed out

WARM_MODULES = ("numpy", "pandas", "matplotlib.pyplot")


def warm_imports(modules: tuple[str, ...]) -> str:
    """A cell that imports `modules` and binds no name (see WARM_IMPORTS), from the sandbox's
    packages only: the workspace (the kernel's folder, last on sys.path) is off sys.path
    meanwhile. A workspace module named like an optional dependency these import (pandas looks
    for bottleneck and numexpr) would otherwise run before any cell, unasked and unseen (F-C1);
    a cell's own import still finds it.

    The cyclic garbage collector is paused meanwhile and then left as it was (a cell may have
    turned it off): importing numpy, pandas and matplotlib.pyplot makes few cycles but hundreds
    of thousands of objects, and the collections they trigger cost about 8% of the imports in a
    plain process here; a session's whole warm-up (open, kernel start, imports) took 2.5% less,
    paired in one run (1,154 ms against 1,183 ms p50)."""
    return (
        "import gc as _g, os as _o, sys as _s\n"
        "_p, _m, _e = _s.path[:], None, _g.isenabled()\n"
        "try:\n"
        "    _s.path[:] = [_d for _d in _p if _d not in ('', '.', _o.getcwd())]\n"
        "    _g.disable()\n"
        f"    for _m in {modules!r}:\n"
        "        __import__(_m)\n"
        "finally:\n"
        "    _s.path[:] = _p\n"
        "    if _e:\n"
        "        _g.enable()\n"
        "    del _g, _o, _s, _p, _m, _e\n"
    )


WARM_IMPORTS = warm_imports(WARM_MODULES)
"""What a warm kernel has imported before its session's first cell (the pool's whole point).
Imported, not bound: the cell leaves no name behind, so a session's cells need their own
imports exactly as in a kernel that was not warmed (and as its notebook export and rerun do);
matplotlib's backend is the kernel's own default (Agg)."""


class LiveSandbox(HeldSession):
    """A held sandbox session (see `HeldSession`) that a live session or the warm pool keeps;
    the pool warms its kernel before a session claims it."""

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

async def close_all(sandboxes: list[LiveSandbox]) -> None:
    """Close several at once (shutdown): one failing close does not keep the others open."""
    await asyncio.gather(*(s.aclose() for s in sandboxes), return_exceptions=True)
