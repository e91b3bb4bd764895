"""A sandbox process that outlives one call (a PTY session, the run_python kernel), for the
local backend.

It is a launcher job like every command (same namespaces, seccomp filter, rlimits, optionally on
a terminal made inside the sandbox). It runs until it exits, its wall clock (`lifetime`, see
`lifetimes`; none only for the kernel), `kill()` (`LocalSandbox.stop_processes`, `stop`), the
workspace watchdog, or the host process dies (--die-with-parent). Like a command's, its kill
takes its whole pid namespace. Output is kept bounded (`live.LiveOutput`); input waits at most
STDIN_WRITE_S for the process to take it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from ..base import EXIT_TIMEOUT
from ..lifetimes import wall_clock_note, wall_clock_stop
from ..live import LiveOutput
from .launcher import Job
from .process import pump, write_all

STDIN_WRITE_S = 5.0  # how long input may wait for a process that does not read it


class LongLived:
    def __init__(self, job: Job, cap: int, *, lifetime: float | None = None, tty: bool = False) -> None:
        self.job = job
        self.tty = tty
        self.stopped_by: str | None = None  # the limit that killed it, named as for a command
        self._forced_exit: int | None = None
        self._output = LiveOutput(cap)
        self._pumps = [asyncio.ensure_future(pump(fd, self._output.keep)) for fd in (job.stdout, job.stderr)]
        self._watcher = asyncio.ensure_future(self._watch())
        self._clock: asyncio.Task[None] | None = None
        if lifetime is not None:
            self._clock = asyncio.ensure_future(self._wall_clock(lifetime))

    @property
    def alive(self) -> bool:
        return not self._output.closed.is_set()

    @property
    def exit_code(self) -> int | None:
        if not self.job.exited.done() or self.alive:
            return None
        return self._forced_exit if self._forced_exit is not None else self.job.exited.result()

    async def _wall_clock(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if not self.job.exited.done():
            await self.kill(wall_clock_note(seconds), stopped_by=wall_clock_stop(seconds), exit_code=EXIT_TIMEOUT)

    async def _watch(self) -> None:
        await self.job.exited
        await asyncio.gather(*self._pumps, return_exceptions=True)
        self._output.closed.set()

    async def collect(self, wait_s: float) -> tuple[bytes, bool]:
        return await self._output.collect(wait_s)

    async def collect_any(self) -> tuple[bytes, bool]:
        return await self._output.collect_any()

    async def write(self, data: bytes) -> None:
        """Send `data` to its stdin (its terminal, with tty; a pipe for a channel); a process that does not take it
        within STDIN_WRITE_S gets the rest dropped, with a note in its output."""
        if self.job.stdin is None or not self.alive:
            return
        try:
            await asyncio.wait_for(write_all(self.job.stdin, data), STDIN_WRITE_S)
        except asyncio.TimeoutError:
            self._output.note(f"input not read within {STDIN_WRITE_S:g} s; the rest was dropped")

    async def kill(self, note: str = "", *, stopped_by: str | None = None, exit_code: int | None = None) -> None:
        """Kill the process's pid namespace, wait for it, release everything. Idempotent.
        `note` goes into its output; `stopped_by` and `exit_code` are what its end reports."""
        if not self.job.exited.done():
            if note:
                self._output.note(note)
            self.stopped_by = stopped_by or note or None
            self._forced_exit = exit_code
            await self.job.kill()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(self._watcher), 5.0)
        for task in (*self._pumps, self._watcher):
            task.cancel()
        if self._clock is not None and self._clock is not asyncio.current_task():
            self._clock.cancel()
        if self.job.stdin is not None:
            os.close(self.job.stdin)
            self.job.stdin = None
        self._output.closed.set()
