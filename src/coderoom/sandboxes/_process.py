"""Running one bwrap invocation: bounded output, a wall-clock deadline, and a kill that takes
the whole process tree with it.

Timeouts never depend on pipe EOF (a grandchild may hold the pipe: catalogue RES-13). On a
deadline we SIGKILL the sandbox's pid 1 (bwrap's init inside the new pid namespace, whose host
pid bwrap reports on --json-status-fd): the kernel then kills every process in that namespace,
and bwrap's outer process only exits after its init is gone, so "bwrap exited" means "tree gone".
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


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


async def spawn_bwrap(
    launch: Launch,
    args: list[str],
    command: list[str],
    seccomp_program: bytes,
    *,
    stdin: bool,
) -> tuple[asyncio.subprocess.Process, int]:
    """Start `bwrap --args FD <command>`: the process (stdout, stderr and, with `stdin`, stdin
    piped) and the read end of its status pipe, for `kill_tree`. The caller closes that fd."""
    seccomp_fd = _memfd("seccomp", seccomp_program)
    status_r, status_w = os.pipe2(os.O_CLOEXEC)
    args_fd = _memfd("args", b"")
    try:
        full = ["--seccomp", str(seccomp_fd), "--json-status-fd", str(status_w), *args]
        os.write(args_fd, b"\0".join(a.encode() for a in full) + b"\0")
        os.lseek(args_fd, 0, os.SEEK_SET)
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            "--args",
            str(args_fd),
            *command,
            stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=launch.env,  # bwrap's own pid 1 keeps it, readable from inside (catalogue §3.1)
            pass_fds=(seccomp_fd, status_w, args_fd),
            executable=launch.executable,
            preexec_fn=launch.preexec,
        )
    except BaseException:
        os.close(status_r)
        raise
    finally:
        for fd in (seccomp_fd, status_w, args_fd):
            os.close(fd)
    return proc, status_r


async def run_bwrap(
    launch: Launch,
    args: list[str],
    command: list[str],
    seccomp_program: bytes,
    *,
    timeout: float,
    output_cap: int,
    stdin: bytes | None = None,
    watchdog: Watchdog | None = None,
    watch_interval: float = 0.25,
) -> Outcome:
    """Run `bwrap --args FD <command>` with options `args` and `seccomp_program`; see module doc."""
    proc, status_r = await spawn_bwrap(launch, args, command, seccomp_program, stdin=stdin is not None)
    try:
        return await _supervise(proc, status_r, stdin, timeout, output_cap, watchdog, watch_interval)
    finally:
        if proc.returncode is None:  # cancelled: never leave a sandbox behind
            await kill_tree(proc, status_r)
        os.close(status_r)


async def _supervise(
    proc: asyncio.subprocess.Process,
    status_r: int,
    stdin: bytes | None,
    timeout: float,
    output_cap: int,
    watchdog: Watchdog | None,
    watch_interval: float,
) -> Outcome:
    out, err = CappedBuffer(output_cap), CappedBuffer(output_cap)
    assert proc.stdout is not None and proc.stderr is not None
    tasks = [
        asyncio.ensure_future(_pump(proc.stdout, out)),
        asyncio.ensure_future(_pump(proc.stderr, err)),
    ]
    if stdin is not None:
        tasks.append(asyncio.ensure_future(_feed(proc, stdin)))
    waiter = asyncio.ensure_future(proc.wait())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    timed_out, stopped_by = False, None
    try:
        while not waiter.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                timed_out = True
                break
            step = min(remaining, watch_interval) if watchdog else remaining
            await asyncio.wait({waiter}, timeout=step)
            if watchdog and not waiter.done():
                stopped_by = await watchdog()
                if stopped_by:
                    break
        if not waiter.done():
            _kill_tree(proc, status_r)
            await asyncio.wait({waiter}, timeout=_KILL_GRACE_S)
        if not waiter.done():  # bwrap did not follow its init: take it down too
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.wait({waiter}, timeout=_KILL_GRACE_S)
        # the namespace is gone, so the pipes reach EOF promptly; bound it anyway
        await asyncio.wait(tasks, timeout=_KILL_GRACE_S)
    finally:
        for task in (*tasks, waiter):
            task.cancel()
    code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    if code < 0:  # bwrap itself died of a signal
        code = 128 - code
    return Outcome(code, out.value(), err.value(), timed_out=timed_out, stopped_by=stopped_by)


async def _pump(stream: asyncio.StreamReader, sink: CappedBuffer) -> None:
    while chunk := await stream.read(_CHUNK):
        sink.feed(chunk)


async def _feed(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.close()


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
