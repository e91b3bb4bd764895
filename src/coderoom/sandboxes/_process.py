"""Processes on the host side of the local sandbox: starting a bwrap, killing its whole tree,
bounded output, pipes read and written in the event loop, and a wall clock with a watchdog.

A bwrap is killed by SIGKILL to the sandbox's pid 1 (bwrap's init inside the new pid namespace,
whose host pid bwrap reports on --json-status-fd): the kernel then kills every process in that
namespace, and bwrap's outer process only exits after its init is gone, so "bwrap exited" means
"tree gone".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .bwrap import Launch

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


@dataclass
class Outcome:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    stopped_by: str | None = None  # a watchdog's reason for killing the command


Watchdog = Callable[[], Awaitable[str | None]]


def memfd(name: str, data: bytes) -> int:
    """A sealed-by-convention anonymous file holding `data`, positioned at its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


async def spawn_bwrap(
    launch: Launch,
    args: list[str],
    command: list[str],
    *,
    pass_fds: tuple[int, ...] = (),
    stdin: bool = False,
) -> tuple[asyncio.subprocess.Process, int]:
    """Start `bwrap --args FD <command>`: the process (stderr piped, stdout too, stdin with
    `stdin`) and the read end of its status pipe, for `kill_tree`. The caller closes that fd."""
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    full = ["--json-status-fd", str(status_w), *args]
    args_fd = memfd("args", b"\0".join(a.encode() for a in full) + b"\0")
    try:
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            "--args",
            str(args_fd),
            *command,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=launch.env,  # bwrap's own pid 1 keeps it, readable from inside (catalogue §3.1)
            pass_fds=(status_w, args_fd, *pass_fds),
            executable=launch.executable,
            preexec_fn=launch.preexec,
        )
    except BaseException:
        os.close(status_r)
        raise
    finally:
        for fd in (status_w, args_fd):
            os.close(fd)
    return proc, status_r


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


async def pump(fd: int, feed: Callable[[bytes], None]) -> None:
    """Read a pipe to EOF in the event loop, handing each chunk to `feed`; closes `fd`."""
    loop = asyncio.get_running_loop()
    eof = loop.create_future()

    def on_readable() -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            feed(chunk)
        elif not eof.done():
            eof.set_result(None)

    os.set_blocking(fd, False)
    loop.add_reader(fd, on_readable)
    try:
        await eof
    finally:
        loop.remove_reader(fd)
        os.close(fd)


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


async def kill_tree(proc: asyncio.subprocess.Process, status_r: int) -> None:
    """`_kill_tree`, then wait (bounded) until bwrap has exited, which means the tree is gone."""
    _kill_tree(proc, status_r)
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(proc.wait(), _KILL_GRACE_S)
    if proc.returncode is None:  # bwrap did not follow its init: take it down too
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(proc.wait(), _KILL_GRACE_S)


def _kill_tree(proc: asyncio.subprocess.Process, status_r: int) -> None:
    """SIGKILL the sandbox's pid 1: the kernel kills its namespace, then bwrap exits.

    Without a known pid 1 (bwrap has not reported it yet), kill bwrap: --die-with-parent
    takes its init down with it.
    """
    child = _child_pid(status_r)
    try:
        if child is None:
            raise ProcessLookupError
        pidfd = os.pidfd_open(child)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            os.close(pidfd)
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


def _child_pid(status_r: int) -> int | None:
    os.set_blocking(status_r, False)
    try:
        data = os.read(status_r, 65536)
    except BlockingIOError:
        return None
    for line in data.decode(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            pid = json.loads(line).get("child-pid")
            if isinstance(pid, int):
                return pid
    return None
