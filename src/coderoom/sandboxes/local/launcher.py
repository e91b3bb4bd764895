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
import functools
import importlib.util
import marshal
import os
import socket
from dataclasses import dataclass, field
from importlib import resources

from . import bwrap
from .process import BwrapProcess, CappedBuffer, memfd, pump

LAUNCHER_PATH = "/opt/coderoom/launcher.pyc"
SECCOMP_PATH = "/opt/coderoom/seccomp.bpf"
SETTINGS_PATH = "/opt/coderoom/launcher.settings"
LAUNCHER_LOST = 125  # the job's exit code when its launcher died under it
_READY_TIMEOUT_S = 10.0
_KILL_TIMEOUT_S = 5.0
_STDERR_CAP = 16384


@dataclass(frozen=True)
class Settings:
    """What every command of a session gets (see launcher_inner)."""

    seccomp: bytes  # the BPF program
    clone_nr: int  # clone(2)'s number on this architecture
    rlimits: list[tuple[int, int, int]]  # (resource.RLIMIT_*, soft, hard)
    tmp_size: int  # bytes, for each command's /tmp and /dev/shm
    workspace: str  # the workspace inside the sandbox: each command's cwd


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
        self._next_id = 0
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stderr = CappedBuffer(_STDERR_CAP)
        self._stderr_task = asyncio.ensure_future(pump(bwrap_process.stderr, self._stderr.feed))
        self._closed = False
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_readable)

    @property
    def pid(self) -> int:
        """bwrap's host pid."""
        return self._bwrap.pid

    async def sandbox_pid(self) -> int | None:
        """The host pid of the sandbox's pid 1, whose namespaces the session's commands share."""
        return await self._bwrap.child_pid()

    @classmethod
    def spawn(cls, launch: bwrap.Launch, args: list[str], python: str, settings: Settings) -> Launcher:
        """Start bwrap with `args` running the launcher under `python`. Jobs may be sent at once
        (they queue on the socket); if the launcher is not ready within 10 s, or exits first,
        they end with LAUNCHER_LOST and `failure()` says why."""
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = marshal.dumps(
            {
                "clone_nr": settings.clone_nr,
                "rlimits": settings.rlimits,
                "tmp_size": settings.tmp_size,
                "workspace": settings.workspace,
            }
        )
        files = {
            LAUNCHER_PATH: memfd("launcher", _compiled_launcher()),
            SECCOMP_PATH: memfd("seccomp", settings.seccomp),
            SETTINGS_PATH: memfd("settings", config),
        }
        try:
            host_end.setblocking(False)
            data_binds = [arg for path, fd in files.items() for arg in ("--ro-bind-data", str(fd), path)]
            argv = [python, "-I", "-S", LAUNCHER_PATH, str(child_end.fileno()), SECCOMP_PATH, SETTINGS_PATH]
            process = BwrapProcess(launch, data_binds + args, ["--", *argv], (child_end.fileno(), *files.values()))
        except BaseException:
            host_end.close()
            raise
        finally:
            child_end.close()
            for fd in files.values():
                os.close(fd)
        launcher = cls(process, host_end)
        timer = asyncio.get_running_loop().call_later(_READY_TIMEOUT_S, launcher._not_ready)
        launcher._ready.add_done_callback(lambda _: timer.cancel())
        return launcher

    def failure(self) -> str:
        """Why the launcher stopped, for error messages."""
        detail = self._stderr.value().decode(errors="replace").strip()
        if self.started:
            return f"the sandbox launcher stopped{': ' + detail if detail else ''}"
        reason = self._ready.exception() if self._ready.done() else None
        return f"the sandbox launcher did not start: {detail or reason or 'no reason given'}"

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

    def start_job(self, argv: list[str], env: dict[str, str], *, stdin: bool) -> Job:
        """Send one command; its pipes come back in the Job."""
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
        body = memfd("request", marshal.dumps({"argv": argv, "env": env}))
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
        for exited in self._jobs.values():
            if not exited.done():
                exited.set_result(LAUNCHER_LOST)
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


@functools.cache
def _compiled_launcher() -> bytes:
    """launcher_inner as a .pyc the sandbox runs directly: compiling it there took 2 ms of every
    session start. The sandbox runs this same interpreter, so the bytecode fits."""
    source = resources.files("coderoom.sandboxes.local.inside").joinpath("launcher_inner.py").read_text()
    code = compile(source, "launcher_inner.py", "exec", dont_inherit=True)
    return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code)  # flags, mtime, size: 0
