"""A sandbox process that outlives one command (the run_python kernel), for the local backend.

It is a bwrap of its own, built like every command's (same mounts, seccomp filter, rlimits), but
with no wall clock: it runs until it exits, `kill()` (pty_terminate_all, session shutdown), the
workspace watchdog, or the host process dies (--die-with-parent). Like a command's, its kill is a
SIGKILL to the sandbox's pid 1, so the whole pid namespace goes with it. Output is kept bounded
(the newest `cap` bytes) because nothing may ever read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque

from agents.sandbox.session.pty_output import collect_pty_output

from ._process import kill_tree

_CHUNK = 65536


class LongLived:
    def __init__(self, proc: asyncio.subprocess.Process, status_r: int, cap: int) -> None:
        self.proc = proc
        self._status_r = status_r
        self._cap = cap
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._dropped = 0
        self._lock = asyncio.Lock()
        self._closed = asyncio.Event()
        assert proc.stdout is not None and proc.stderr is not None
        self._pumps = [asyncio.ensure_future(self._pump(s)) for s in (proc.stdout, proc.stderr)]
        self._watcher = asyncio.ensure_future(self._watch())

    @property
    def alive(self) -> bool:
        return not self._closed.is_set()

    @property
    def exit_code(self) -> int | None:
        code = self.proc.returncode
        if code is None or not self._closed.is_set():
            return None
        return 128 - code if code < 0 else code  # bwrap itself died of a signal

    async def _pump(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_CHUNK):
            async with self._lock:
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
        await self.proc.wait()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        self._closed.set()

    async def collect(
        self, yield_time_ms: int, max_output_tokens: int | None
    ) -> tuple[bytes, int | None, bool]:
        """Output since the last call, after `yield_time_ms` or when the process ends.

        Waits first and drains after, so the output stays within `cap` however much arrives
        while waiting; the SDK's collector then does the UTF-8 carry and token truncation.
        """
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._closed.wait(), yield_time_ms / 1000)
        async with self._lock:
            if self._dropped:
                self._chunks.appendleft(f"[... {self._dropped} bytes of output dropped ...]\n".encode())
                self._dropped = 0
        collected = await collect_pty_output(
            output_chunks=self._chunks,
            output_lock=self._lock,
            output_notify=asyncio.Event(),  # unused: nothing is waited for with yield_time_ms=0
            is_done=self._closed.is_set,
            yield_time_ms=0,
            max_output_tokens=max_output_tokens,
        )
        async with self._lock:  # what is left: a partial UTF-8 character, or what came meanwhile
            self._size = sum(len(chunk) for chunk in self._chunks)
        return collected

    async def write(self, data: bytes) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(data)
            await stdin.drain()

    async def kill(self, note: str = "") -> None:
        """SIGKILL the sandbox's pid namespace, wait for bwrap, release everything. Idempotent."""
        if self.proc.returncode is None:
            if note:
                async with self._lock:
                    self._chunks.append(f"\n[coderoom: {note}]\n".encode())
            await kill_tree(self.proc, self._status_r)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(self._watcher), 5.0)
        for task in (*self._pumps, self._watcher):
            task.cancel()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self._status_r >= 0:
            os.close(self._status_r)
            self._status_r = -1
        self._closed.set()

