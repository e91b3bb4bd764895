"""Host side of the local sandbox's per-session launcher (the program is `launcher_inner`).

One bwrap per session runs the launcher; each command is a `Job` it forks into fresh PID, mount
and IPC namespaces. The host keeps the pipes of every job and the launcher's control socket;
nothing in the sandbox can reach either.

If the launcher dies or stops answering, its bwrap is killed (taking every job with it), pending
jobs end with `LAUNCHER_LOST`, and the session starts a new launcher for its next command.
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import os
import socket
from dataclasses import dataclass, field

from .process import BwrapProcess, CappedBuffer, pump
from .spawn import Settings, Started, memfd

__all__ = ["LAUNCHER_LOST", "Job", "Launcher", "LauncherError", "Settings"]

LAUNCHER_LOST = 125  # the job's exit code when its launcher died under it
_READY_TIMEOUT_S = 10.0
_KILL_TIMEOUT_S = 5.0
_STDERR_CAP = 16384


class LauncherError(RuntimeError):
    """The launcher could not start or stopped answering."""


@dataclass
class Job:
    """One command started by the launcher: the host ends of its pipes and its exit status."""

    id: int
    launcher: Launcher
    stdin: int | None  # write end, or None when the command reads /dev/null
    stdout: int
    stderr: int
    exited: asyncio.Future[int] = field(repr=False)

    @property
    def lost(self) -> bool:
        """Whether the job ended because its launcher stopped under it (its LAUNCHER_LOST is then
        no exit code of the command's, which may exit 125 itself)."""
        return self.id in self.launcher.lost_jobs

    async def kill(self) -> None:
        """SIGKILL the job's whole PID namespace and wait until it is gone (bounded)."""
        if self.exited.done():
            return
        self.launcher.send_kill(self.id)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), _KILL_TIMEOUT_S)
        if not self.exited.done():  # the launcher is stuck: take it and every job down
            await self.launcher.close()


class Launcher:
    def __init__(self, bwrap_process: BwrapProcess, sock: socket.socket) -> None:
        self._bwrap = bwrap_process
        self._sock = sock
        self._jobs: dict[int, asyncio.Future[int]] = {}
        self.lost_jobs: set[int] = set()  # ids of the jobs it failed by stopping (`Job.lost`)
        self._next_id = 0
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stderr = CappedBuffer(_STDERR_CAP)
        self._stderr_task = asyncio.ensure_future(pump(bwrap_process.stderr, self._stderr.feed))
        self._closed = False
        self._unadmitted = False  # ready, but its pid 1 went past the gate unadmitted (EOF)
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)

    @property
    def pid(self) -> int:
        """bwrap's host pid."""
        return self._bwrap.pid

    async def sandbox_pid(self) -> int | None:
        """The host pid of the sandbox's pid 1, whose namespaces the session's commands share."""
        return await self._bwrap.child_pid()

    @classmethod
    def adopt(cls, started: Started) -> Launcher:
        """Watch a launcher `spawn.spawn_launcher` started. Send jobs once it is ready
        (`wait_ready`): if it is not ready within 10 s, or exits first, they end with
        LAUNCHER_LOST and `failure()` says why."""
        process = BwrapProcess(started.popen, started.status, started.stderr, started.admission)
        launcher = cls(process, started.sock)
        timer = asyncio.get_running_loop().call_later(_READY_TIMEOUT_S, launcher._not_ready)
        launcher._ready.add_done_callback(lambda _: timer.cancel())
        return launcher

    def failure(self) -> str:
        """Why the launcher stopped, for error messages."""
        if self._bwrap.gate_error:
            return self._bwrap.gate_error
        if self._unadmitted:
            return "the sandbox went past its gate without being admitted (memory cgroup and uid checks)"
        detail = self._stderr.value().decode(errors="replace").strip()
        if self.started:  # its last words: a traceback's last line names the cause
            return f"the sandbox launcher stopped{': ' + detail.splitlines()[-1] if detail else ''}"
        reason = self._ready.exception() if self._ready.done() else None
        return f"the sandbox launcher did not start: {detail or reason or 'no reason given'}"

    async def wait_ready(self) -> bool:
        """Wait until the launcher has said it is ready (True) or failed to start (False). Only a
        launcher past the gate can say so, and it counts only once the gate's thread has admitted
        its pid 1 (see `gate`: pid 1 also goes on at EOF), so no command is sent before that."""
        with contextlib.suppress(LauncherError):
            await asyncio.shield(self._ready)
        if self.started and not self._bwrap.admitted:
            self._unadmitted = True
            return False
        return self.started

    @property
    def started(self) -> bool:
        """Whether the launcher ever said it was ready."""
        return self._ready.done() and self._ready.exception() is None

    def _not_ready(self) -> None:
        if not self._ready.done():
            self._ready.set_exception(LauncherError(f"not ready after {_READY_TIMEOUT_S:g} s"))
            self._ready.exception()  # retrieved: `failure()` reports it
            asyncio.ensure_future(self.close())

    @property
    def alive(self) -> bool:
        return not self._closed

    @property
    def settled(self) -> bool:
        """Whether every job this launcher was sent has had its exit reported while it still
        runs. A report comes only once the job's namespace holds no process (see
        launcher_inner), so then no payload process is left in the sandbox: the launcher, bwrap,
        the launcher's preparer and the next slot's init and stub are copies of the launcher,
        holding no file of the payload's."""
        return not self._closed and not self._jobs

    def start_job(self, argv: list[str], env: dict[str, str], *, stdin: bool, tty: bool = False) -> Job:
        """Send one command; its pipes come back in the Job. With `tty`, the command runs on a
        terminal made inside the sandbox (see launcher_inner); stdout carries its output."""
        if self._closed:
            raise LauncherError("the sandbox launcher has stopped")
        self._next_id += 1
        job_id = self._next_id
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        if stdin:
            in_r, in_w = os.pipe2(os.O_CLOEXEC)
        else:
            in_r, in_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), None
        body = memfd("request", marshal.dumps({"argv": argv, "env": env, "tty": tty}))
        theirs = [in_r, out_w, err_w, body]
        exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        try:
            socket.send_fds(self._sock, [marshal.dumps({"op": "run", "id": job_id})], theirs)
        except OSError as exc:
            for fd in (out_r, err_r, in_w):
                if fd is not None:
                    os.close(fd)
            raise LauncherError(f"the sandbox launcher is not answering ({exc})") from exc
        finally:
            for fd in theirs:
                os.close(fd)
        self._jobs[job_id] = exited
        return Job(job_id, self, in_w, out_r, err_r, exited)

    def send_kill(self, job_id: int) -> None:
        with contextlib.suppress(OSError):
            self._sock.send(marshal.dumps({"op": "kill", "id": job_id}))

    def _on_readable(self) -> None:
        while True:
            try:
                data = self._sock.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:  # the launcher is gone
                self._lost()
                return
            self._dispatch(data)

    def _dispatch(self, data: bytes) -> None:
        """`ready` or `exit ID CODE`; anything else from inside the sandbox is ignored."""
        words = data.split()
        if words == [b"ready"] and not self._ready.done():
            self._ready.set_result(None)
        elif len(words) == 3 and words[0] == b"exit" and words[1].isdigit():
            exited = self._jobs.pop(int(words[1]), None)
            if exited is not None and not exited.done():
                code = words[2]
                exited.set_result(int(code) if code.isdigit() and len(code) <= 3 else LAUNCHER_LOST)

    def _lost(self) -> None:
        asyncio.get_running_loop().remove_reader(self._sock.fileno())
        if not self._ready.done():
            self._ready.set_exception(LauncherError("the launcher exited"))
            self._ready.exception()  # retrieved: `failure()` reports it
        self._fail_jobs()
        self._closed = True

    def _fail_jobs(self) -> None:
        """Every job still waiting for its exit ends with LAUNCHER_LOST."""
        for job_id, exited in self._jobs.items():
            if not exited.done():
                exited.set_result(LAUNCHER_LOST)
                self.lost_jobs.add(job_id)
        self._jobs.clear()

    async def close(self) -> None:
        """Stop the launcher and every job: its bwrap's pid 1 is killed, then we wait for bwrap."""
        if self._sock.fileno() >= 0:
            if not self._closed:
                asyncio.get_running_loop().remove_reader(self._sock.fileno())
            self._sock.close()
        self._closed = True
        await self._bwrap.kill()
        self._fail_jobs()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self._stderr_task, _KILL_TIMEOUT_S)


