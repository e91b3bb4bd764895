"""Processes on the host side of the local sandbox: starting a bwrap, killing its whole tree,
bounded output, pipes read and written in the event loop, and a wall clock with a watchdog.

A bwrap is killed by SIGKILL to the sandbox's pid 1 (bwrap's init inside the new pid namespace,
whose host pid bwrap reports on --json-status-fd): the kernel then kills every process in that
namespace, and bwrap's outer process only exits after its init is gone, so "bwrap exited" means
"tree gone". Before bwrap has reported its pid 1, its process group is killed instead, which
holds that pid 1 until it is set up (`spawn.kill_sandbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Awaitable, Callable

from .gate import Admission
from .spawn import kill_late_init, kill_sandbox
from .status import StatusPipe

_CHUNK = 65536
_KILL_GRACE_S = 5.0


class CappedBuffer:
    """Keeps the first and last `cap/2` bytes of a stream and counts what it dropped."""

    def __init__(self, cap: int) -> None:
        self._head_cap = cap - cap // 2
        self._tail_cap = cap // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.dropped = 0

    def feed(self, data: bytes) -> None:
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data
        overflow = len(self._tail) - self._tail_cap
        if overflow > 0:
            del self._tail[:overflow]
            self.dropped += overflow

    def value(self) -> bytes:
        if not self.dropped:
            return bytes(self._head + self._tail)
        marker = f"\n[... truncated {self.dropped} bytes ...]\n".encode()
        return bytes(self._head) + marker + bytes(self._tail)


Watchdog = Callable[[], Awaitable[str | None]]


class BwrapProcess:
    """A running `bwrap --args FD <command>`, its exit watched through a pidfd in the event loop.

    Started with a plain `subprocess.Popen` (`spawn.start_bwrap`): asyncio's subprocess
    machinery would add pipe transports and a child-watcher thread to every session start.
    bwrap's stdin and stdout are /dev/null; `stderr` is the read end of its stderr pipe.
    """

    def __init__(
        self, popen: subprocess.Popen[bytes], status: StatusPipe, err_r: int, admission: Admission | None = None
    ) -> None:
        """Watch a bwrap started by `spawn.start_bwrap` (the pipes' read ends are ours now), its
        pid 1 at the gate if `admission` (see `gate`)."""
        self.popen = popen
        self.stderr = err_r
        self._status = status
        self._admission = admission
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[int] = loop.create_future()
        self._pidfd = os.pidfd_open(self.popen.pid)
        loop.add_reader(self._pidfd, self._on_exit)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def admitted(self) -> bool:
        """Whether the gate let pid 1 through after its checks (True when there is no gate here)."""
        return self._admission is None or self._admission.passed

    @property
    def gate_error(self) -> str | None:
        """Why the gate stopped the sandbox, once it has (see `gate`)."""
        return self._admission.error if self._admission is not None else None

    async def child_pid(self) -> int | None:
        """The sandbox's pid 1 (host pid), once bwrap has made its namespaces; None if it exited."""
        loop = asyncio.get_running_loop()
        while self._status.child_pid() is None and not self.exited.done() and self._status.fd >= 0:
            readable = loop.create_future()
            loop.add_reader(self._status.fd, lambda: None if readable.done() else readable.set_result(None))
            try:
                await asyncio.wait({readable, self.exited}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                loop.remove_reader(self._status.fd)
        return self._status.child_pid()

    def _on_exit(self) -> None:
        asyncio.get_running_loop().remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = -1
        kill_sandbox(self.popen, None)  # a pid 1 it left blocked at start (see kill_sandbox); unreaped: safe
        code = self.popen.wait()
        if not self.exited.done():
            self.exited.set_result(128 - code if code < 0 else code)

    async def kill(self) -> None:
        """SIGKILL the sandbox's pid 1 and wait (bounded) until bwrap has exited, which means
        the whole tree is gone; bwrap itself goes too if it does not follow. Idempotent."""
        if not self.exited.done():
            self._kill_tree()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), _KILL_GRACE_S)
        if not self.exited.done():
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), _KILL_GRACE_S)
        if self._status.fd >= 0:
            kill_late_init(self._status)
            self._status.close()
        if self._admission is not None and self.exited.done():
            self._admission.close()

    def _kill_tree(self) -> None:
        """SIGKILL the sandbox's pid 1, or bwrap's group before it has reported one (`kill_sandbox`)."""
        kill_sandbox(self.popen, self._status.child_pid())


async def supervise(
    exited: asyncio.Future[int],
    kill: Callable[[], Awaitable[None]],
    *,
    timeout: float,
    watchdog: Watchdog | None = None,
    watch_interval: float = 0.25,
) -> tuple[bool, str | None]:
    """Wait for `exited` until the deadline or the watchdog objects, then `kill`.

    Returns (timed_out, watchdog's reason). Timeouts never depend on pipe EOF (a grandchild
    may hold the pipe: catalogue RES-13).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    timed_out, stopped_by = False, None
    while not exited.done():
        remaining = deadline - loop.time()
        if remaining <= 0:
            timed_out = True
            break
        step = min(remaining, watch_interval) if watchdog else remaining
        await asyncio.wait({exited}, timeout=step)
        if watchdog and not exited.done():
            stopped_by = await watchdog()
            if stopped_by:
                break
    if not exited.done():
        await kill()
    return timed_out, stopped_by


class PipeReader:
    """Reads a pipe to EOF in the event loop's own callbacks, handing each chunk to `feed`.

    `eof` is done at EOF, with the pipe closed and no longer watched; `close()` stops earlier.
    It needs no task: a command's two output pipes then cost no task steps and no loop pass
    between their EOF and the command's result (issue 25)."""

    def __init__(self, fd: int, feed: Callable[[bytes], None]) -> None:
        self._fd = fd
        self._feed = feed
        self._loop = asyncio.get_running_loop()
        self.eof: asyncio.Future[None] = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._feed(chunk)
        else:
            self.close()

    def close(self) -> None:
        """Stop watching and close the pipe (idempotent); `eof` is done from then on."""
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        if not self.eof.done():
            self.eof.set_result(None)


async def pump(fd: int, feed: Callable[[bytes], None]) -> None:
    """Read a pipe to EOF in the event loop, handing each chunk to `feed`; closes `fd`."""
    reader = PipeReader(fd, feed)
    try:
        await reader.eof
    finally:
        reader.close()


async def write_all(fd: int, data: bytes) -> None:
    """Write `data` to a pipe without blocking the loop; a reader that went away ends it."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    done = loop.create_future()

    def on_writable() -> None:
        nonlocal view
        try:
            view = view[os.write(fd, view[:_CHUNK]):]
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the reader is gone
            view = view[:0]
        if not view and not done.done():
            done.set_result(None)

    if not view:
        return
    os.set_blocking(fd, False)
    loop.add_writer(fd, on_writable)
    try:
        await done
    finally:
        loop.remove_writer(fd)
