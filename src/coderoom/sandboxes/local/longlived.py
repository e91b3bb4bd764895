"""A sandbox process that outlives one command (the run_python kernel), for the local backend.

It is a launcher job like every command (same namespaces, seccomp filter, rlimits), but with no
wall clock: it runs until it exits, `kill()` (`LocalSandbox.stop_processes`, `stop`), the
workspace watchdog, or the host process dies (--die-with-parent). Like a command's, its kill
takes its whole pid namespace. Output is kept bounded (the newest `cap` bytes) because nothing
may ever read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque

from .launcher import Job
from .process import pump, write_all


class LongLived:
    def __init__(self, job: Job, cap: int) -> None:
        self.job = job
        self._cap = cap
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._dropped = 0
        self._lock = asyncio.Lock()
        self._closed = asyncio.Event()
        self._pumps = [asyncio.ensure_future(pump(fd, self._keep)) for fd in (job.stdout, job.stderr)]
        self._watcher = asyncio.ensure_future(self._watch())

    @property
    def alive(self) -> bool:
        return not self._closed.is_set()

    @property
    def exit_code(self) -> int | None:
        if not self.job.exited.done() or not self._closed.is_set():
            return None
        return self.job.exited.result()

    def _keep(self, chunk: bytes) -> None:
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size > self._cap:  # keep the newest `cap` bytes
            excess = self._size - self._cap
            oldest = self._chunks.popleft()
            if len(oldest) > excess:
                self._chunks.appendleft(oldest[excess:])
            cut = min(excess, len(oldest))
            self._size -= cut
            self._dropped += cut

    async def _watch(self) -> None:
        await self.job.exited
        await asyncio.gather(*self._pumps, return_exceptions=True)
        self._closed.set()

    async def collect(self, wait_s: float) -> tuple[bytes, bool]:
        """Output since the last call, after `wait_s` or when the process ends; and whether it ended.

        Waits first and drains after, so the output stays within `cap` however much arrives
        while waiting. Bytes as they came: a UTF-8 character may be split between two calls.
        """
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._closed.wait(), wait_s)
        closed = self._closed.is_set()
        async with self._lock:
            output = b"".join(self._chunks)
            if self._dropped:
                output = f"[... {self._dropped} bytes of output dropped ...]\n".encode() + output
            self._chunks.clear()
            self._size = self._dropped = 0
        return output, closed

    async def write(self, data: bytes) -> None:
        if self.job.stdin is not None and not self._closed.is_set():
            await write_all(self.job.stdin, data)

    async def kill(self, note: str = "") -> None:
        """Kill the process's pid namespace, wait for it, release everything. Idempotent."""
        if not self.job.exited.done():
            if note:
                self._chunks.append(f"\n[coderoom: {note}]\n".encode())
            await self.job.kill()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(self._watcher), 5.0)
        for task in (*self._pumps, self._watcher):
            task.cancel()
        if self.job.stdin is not None:
            os.close(self.job.stdin)
            self.job.stdin = None
        self._closed.set()
