"""The `local` backend: bubblewrap isolation with no daemon and no root.

One bwrap per session runs a small launcher (`launcher_inner`) inside the session's user,
network, UTS and cgroup namespaces. Every command gets fresh PID, mount and IPC namespaces of
its own, forked by the launcher from a slot it prepared in advance, with no capabilities, the
seccomp filter and the rlimits: about 6 ms less per command than a bwrap each. A command's
namespaces die with it, so a timeout kills its whole tree (setsid'd orphans included) and
nothing of it runs between commands (host-side file operations and archiving cannot race with
it). The launcher is out of the payload's reach (see `launcher_inner`); the host keeps its
control socket and every command's pipes (`launcher`). Shared by the commands of one session,
as the processes of one container are: the network namespace (loopback and abstract unix
sockets: a shell command can reach a server the kernel process started) and the hostname.
Session start is mostly the launcher's Python starting (about 20 ms here).

`pty_exec_start` (the run_python kernel) runs the same way but without the wall clock, killed
by `pty_terminate_all()`, on close, over the workspace limit, or when this process dies (see
`_longlived`). Host-side walks of the workspace tolerate it changing the tree meanwhile
(`_workspace`).

The sandbox's Python is the host interpreter's (`bwrap.Runtime`): its base installation at
/opt/coderoom/python and, from a venv, a venv of its own at /opt/coderoom/venv with the host
venv's site-packages, all read-only; nothing else of the host's folders is visible.

What persists between commands is /workspace only: a host directory private to the session
(mode 0700, deleted by `client.delete`). /tmp and /dev/shm are fresh size-capped tmpfs per
command, and HOME=/tmp, so login-shell or Python start-up files written by one command are
not read by the next one (catalogue SES-02).

Limits (see `Limits`):
* timeout: wall clock per command; the sandbox's pid 1 is SIGKILLed, the tree dies with it.
  The command returns exit code 124 (`EXIT_TIMEOUT`); a shorter caller `timeout=` raises the
  SDK's ExecTimeoutError instead.
* memory: a memory cgroup per session where one can be had (`cgroup`): every process, tmpfs and
  shared memory count; at the limit the kernel kills in the command (exit 137, with a note
  naming the limit). Also RLIMIT_AS per process, so one large allocation fails with MemoryError.
  Without a cgroup, RLIMIT_AS only, and memfd_create/shmget are refused (`enforcement`).
* pids: RLIMIT_NPROC, set inside the session's user namespace, so it counts the session's
  tasks (threads included; the launcher and each running command's init count too) and
  nothing of the host.
* cpu_time: RLIMIT_CPU per process; file_size: RLIMIT_FSIZE, at most workspace_size.
* workspace_size: /workspace by allocated blocks and apparent size, plus deleted files still
  held open (`disk`), polled every 0.25 s while a command runs and checked when it ends; over
  the limit the command is killed and fails with a message naming the limit. fallocate is
  refused. The overshoot is what one command can write in 0.25 s; also capped: 100 000 entries
  and 256 levels of directories.
* network: off, only lo; on, a namespace of its own through slirp4netns (`network`).
* output_bytes: per stream, head and tail kept, the middle replaced by a truncation marker.
"""

from __future__ import annotations

import asyncio
import errno
import io
import os
import resource
import stat
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from agents.sandbox import Manifest
from agents.sandbox.errors import (
    ExecTimeoutError,
    ExecTransportError,
    PtySessionNotFoundError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.session import SandboxSession, SandboxSessionState
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.pty_types import (
    PtyExecUpdate,
    allocate_pty_process_id,
    clamp_pty_yield_time_ms,
    resolve_pty_write_yield_time_ms,
)
from agents.sandbox.session.sandbox_client import (
    BaseSandboxClient,
    BaseSandboxClientOptions,
)
from agents.sandbox.session.workspace_payloads import coerce_write_payload
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
from agents.sandbox.types import ExecResult, User
from pydantic import Field

from ...errors import SandboxUnavailable
from ...hostile import archive as hostile_archive
from ...hostile import tree
from ..base import EXIT_KILLED, EXIT_TIMEOUT
from ..limits import Limits
from ..one_user import plain_shell, refuse_manifest_accounts
from ..seccomp import host_arch
from . import bwrap, disk, enforcement, network
from .cgroup import MemoryCgroup
from .launcher import LAUNCHER_LOST, Job, Launcher, LauncherError, Settings
from .longlived import LongLived
from .process import CappedBuffer, Outcome, pump, supervise, write_all

_HOST_DIR_PREFIX = "coderoom-local-"
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
_NOFILE = 512
_LONG_LIVED_MAX = 8
_PIPE_GRACE_S = 5.0
_LONG_LIVED_POLL_S = 0.25
_LONG_LIVED_WALK_AT_LEAST_S = 5.0

BASE_ENV = {
    "PATH": ":".join(
        dict.fromkeys(
            [bwrap.runtime().bin_dir, f"{bwrap.RUNTIME_MOUNT}/bin", "/usr/local/bin", "/usr/bin", "/bin"]
        )
    ),
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "USER": "sandbox",
    "LOGNAME": "sandbox",
    "SHELL": "/bin/sh",
    "LANG": "C.UTF-8",
    "TZ": "UTC",
    "TERM": "dumb",
    "MPLBACKEND": "Agg",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONNOUSERSITE": "1",
}


class LocalSandboxSessionState(SandboxSessionState):
    type: Literal["coderoom_local"] = "coderoom_local"
    host_dir: str = ""
    limits: Limits = Field(default_factory=Limits)


class LocalSandboxClientOptions(BaseSandboxClientOptions):
    type: Literal["coderoom_local"] = "coderoom_local"


class LocalSandboxSession(BaseSandboxSession):
    state: LocalSandboxSessionState

    def __init__(self, state: LocalSandboxSessionState, bw: bwrap.Bwrap) -> None:
        self.state = state
        self._bwrap = bw
        arch = host_arch()
        assert arch is not None  # unavailable_reason() refuses such hosts
        self._seccomp = enforcement.seccomp_filter(arch)
        self._clone_nr = arch.table["clone"]
        self._running = False
        self._active_commands = 0
        self._archiving = False
        self._quiet = asyncio.Condition()
        self._python, self._views = _python_mounts(self.host_dir)
        self._launch_cache: bwrap.Launch | None = None
        self._memory: MemoryCgroup | None = None  # limits: made with the launch, removed after it
        self._egress: network.Egress | None = None  # limits: with network on, stopped with the launcher
        self._namespace_fd = -1
        self._launcher: Launcher | None = None
        self._launcher_lock = asyncio.Lock()
        self._long_lived: dict[int, LongLived] = {}
        self._long_lived_watch: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ layout

    @property
    def host_dir(self) -> Path:
        return Path(self.state.host_dir)

    @property
    def workspace_dir(self) -> Path:
        return self.host_dir / "workspace"

    def _rel(self, path: Path | str, *, for_write: bool = False) -> PurePosixPath:
        """The workspace-relative path for a sandbox path (the SDK validates containment)."""
        normalized = PurePosixPath(self.normalize_path(path, for_write=for_write).as_posix())
        return normalized.relative_to(bwrap.WORKSPACE)

    # ------------------------------------------------------------------ lifecycle

    async def _ensure_backend_started(self) -> None:
        if not self.workspace_dir.is_dir():
            raise ExecTransportError(
                command=("start",), context={"reason": "workspace directory is gone"}
            )
        await self._ensure_launcher()  # it starts while the SDK applies the manifest

    async def _ensure_launcher(self) -> Launcher:
        """The session's launcher, (re)started if it is not running."""
        async with self._launcher_lock:
            if self._launcher is None or not self._launcher.alive:
                if self._launcher is not None:
                    await self._launcher.close()
                self._launcher = None
                try:
                    self._launcher = Launcher.spawn(
                        self._launch(), self._bwrap_args(), bwrap.runtime().sandbox_interpreter, self._settings()
                    )
                except OSError as exc:
                    reason = f"cannot start bubblewrap: {exc}"
                    raise ExecTransportError(command=("start",), context={"reason": reason}) from exc
                if self.state.limits.network:  # limits: a namespace of its own, see network
                    if self._egress is not None:
                        await asyncio.to_thread(self._egress.close)
                    self._egress = await network.Egress.attach(await self._launcher.sandbox_pid())
            return self._launcher

    async def _after_start(self) -> None:
        self._running = True

    async def _after_start_failed(self) -> None:
        self._running = False

    async def _after_shutdown(self) -> None:
        self._running = False
        await self.stop_launcher()

    def _launch(self) -> bwrap.Launch:
        """Made on first use: as root, the mount namespace with the runtime views (see bwrap)."""
        if self._launch_cache is None:
            if bwrap.host_id() is None:
                self._launch_cache = bwrap.direct(self._bwrap)
            else:
                self._namespace_fd = bwrap.views_namespace(self._views)
                self._launch_cache = bwrap.as_unprivileged(self._bwrap, self._namespace_fd)
            self._memory = MemoryCgroup.for_session(self.state.limits.memory)  # limits
            if self._memory is not None:
                self._launch_cache = self._memory.wrap(self._launch_cache)
        return self._launch_cache

    async def stop_launcher(self) -> None:
        """Stop the launcher (every command and long-lived process dies with it)."""
        await self.pty_terminate_all()
        async with self._launcher_lock:
            if self._launcher is not None:
                await self._launcher.close()
                self._launcher = None
        if self._egress is not None:  # limits
            await asyncio.to_thread(self._egress.close)
            self._egress = None
        self._launch_cache = None
        if self._namespace_fd >= 0:
            os.close(self._namespace_fd)
            self._namespace_fd = -1
        if self._memory is not None:  # limits
            await asyncio.to_thread(self._memory.remove)
            self._memory = None

    async def running(self) -> bool:
        return self._running

    def supports_pty(self) -> bool:
        return False

    async def provision_manifest_accounts(self) -> None:
        refuse_manifest_accounts(self.state.manifest, "local")

    # ------------------------------------------------------------------ exec

    def _prepare_exec_command(
        self, *command: str | Path, shell: bool | list[str], user: str | User | None
    ) -> list[str]:
        return super()._prepare_exec_command(
            *command, shell=plain_shell(shell, user, "local"), user=None
        )

    async def _exec_internal(self, *command: str | Path, timeout: float | None = None) -> ExecResult:
        limit = self.state.limits.timeout
        effective = limit if timeout is None else min(timeout, limit)
        outcome = await self.run_command([str(c) for c in command], timeout=effective)
        if outcome.timed_out and effective < limit:
            raise ExecTimeoutError(command=command, timeout_s=timeout)
        return ExecResult(stdout=outcome.stdout, stderr=outcome.stderr, exit_code=outcome.exit_code)

    async def run_command(
        self,
        argv: list[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        output_cap: int | None = None,
    ) -> Outcome:
        """Run `argv` in fresh namespaces; timeouts and the workspace limit are reported in-band."""
        cap = output_cap or self.state.limits.output_bytes
        out, err = CappedBuffer(cap), CappedBuffer(cap)
        async with self._quiet:
            await self._quiet.wait_for(lambda: not self._archiving)
            self._active_commands += 1
        try:
            job = await self._start_job(argv, stdin=stdin is not None)
            oom_kills = self._memory.oom_kills() if self._memory else 0  # limits
            pumps = [asyncio.ensure_future(pump(job.stdout, out.feed)), asyncio.ensure_future(pump(job.stderr, err.feed))]
            if job.stdin is not None:
                pumps.append(asyncio.ensure_future(_feed_and_close(job.stdin, stdin or b"")))
            try:
                timed_out, stopped_by = await supervise(
                    job.exited, job.kill, timeout=timeout, watchdog=self._workspace_watchdog
                )
                # the namespace is gone, so the pipes reach EOF promptly; bound it anyway
                await asyncio.wait(pumps, timeout=_PIPE_GRACE_S)
            finally:
                if not job.exited.done():  # cancelled: never leave a command behind
                    await asyncio.shield(job.kill())
                for task in pumps:
                    task.cancel()
            if stopped_by is None:  # inline: a thread hop costs more than a usual walk
                stopped_by = self._workspace_over_limit()
        finally:
            async with self._quiet:
                self._active_commands -= 1
                self._quiet.notify_all()
        if job.exited.result() == LAUNCHER_LOST and not job.launcher.started:
            raise ExecTransportError(command=tuple(argv), context={"reason": job.launcher.failure()})
        outcome = Outcome(job.exited.result(), out.value(), err.value(), timed_out, stopped_by)
        memory_note = self._memory.oom_note(oom_kills) if self._memory else None  # limits
        if memory_note:
            outcome.stderr += f"\n[coderoom: {memory_note}]\n".encode()
        if outcome.timed_out:
            outcome.exit_code = EXIT_TIMEOUT
            outcome.stderr += f"\n[coderoom: killed after the {timeout:g} s wall-clock limit]\n".encode()
        elif outcome.stopped_by:
            outcome.exit_code = outcome.exit_code or 1
            if outcome.exit_code == EXIT_KILLED:
                outcome.exit_code = 1  # we killed it for disk, not memory
            outcome.stderr += f"\n[coderoom: {outcome.stopped_by}]\n".encode()
        return outcome

    async def _start_job(self, argv: list[str], *, stdin: bool) -> Job:
        """Hand `argv` to the session's launcher, starting the launcher first if needed."""
        env = await self._command_env()
        launcher = await self._ensure_launcher()
        try:
            return launcher.start_job(argv, env, stdin=stdin)
        except LauncherError as exc:
            await launcher.close()
            raise ExecTransportError(command=tuple(argv), context={"reason": str(exc)}) from exc

    async def _command_env(self) -> dict[str, str]:
        return {**_with_library_path(BASE_ENV), **await self.state.manifest.environment.resolve()}

    def _bwrap_args(self) -> list[str]:
        limits = self.state.limits
        mounts = bwrap.Mounts(
            etc_dir=self.host_dir / "etc",
            workspace_dir=self.workspace_dir,
            python=self._python,
            tmp_size=limits.tmp_size,
            network=limits.network,
        )
        launcher_env = _with_library_path({"PATH": BASE_ENV["PATH"], "LANG": "C.UTF-8"})
        return bwrap.build_args(self._bwrap, mounts, launcher_env)

    def _settings(self) -> Settings:
        limits = self.state.limits
        rlimits = [
            (resource.RLIMIT_CORE, 0),
            (resource.RLIMIT_NOFILE, _NOFILE),
            (resource.RLIMIT_CPU, limits.cpu_time),
            (resource.RLIMIT_FSIZE, min(limits.file_size, limits.workspace_size)),  # limits: no file outgrows it
            (resource.RLIMIT_AS, limits.memory),
            (resource.RLIMIT_NPROC, limits.pids),
        ]
        return Settings(self._seccomp, self._clone_nr, rlimits, limits.tmp_size)

    async def _workspace_watchdog(self) -> str | None:
        return await asyncio.to_thread(self._workspace_over_limit)

    def _workspace_over_limit(self) -> str | None:
        launcher = self._launcher.pid if self._launcher else None  # limits: see disk
        return disk.over_limit(self.workspace_dir, self.state.limits.workspace_size, launcher)

    # ------------------------------------------------------------------ long-lived processes

    async def pty_exec_start(
        self,
        *command: str | Path,
        timeout: float | None = None,
        shell: bool | list[str] = True,
        user: str | User | None = None,
        tty: bool = False,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        """Start a process that outlives this call (the run_python kernel): see `_longlived`.

        No terminal (tty=True is refused, and `supports_pty()` stays False, so the SDK's shell
        tool keeps running one-shot commands under the wall clock). `timeout` is not a lifetime:
        the process runs until it exits, `pty_terminate_all()` or the session closes. It is not
        counted in `_active_commands`, so it never holds up `persist_workspace`.
        """
        _ = timeout
        if tty:
            raise ValueError("the local sandbox has no terminal: start processes with tty=False")
        argv = self._prepare_exec_command(*command, shell=shell, user=user)
        live = [pid for pid, entry in self._long_lived.items() if entry.alive]
        if len(live) >= _LONG_LIVED_MAX:
            reason = f"{_LONG_LIVED_MAX} long-lived processes already run"
            raise ExecTransportError(command=tuple(argv), context={"reason": reason})
        for pid in [pid for pid in self._long_lived if pid not in live]:  # ended, never read again
            await self._long_lived.pop(pid).kill()
        job = await self._start_job(argv, stdin=True)
        entry = LongLived(job, self.state.limits.output_bytes)
        process_id = allocate_pty_process_id(set(self._long_lived))
        self._long_lived[process_id] = entry
        if self._long_lived_watch is None or self._long_lived_watch.done():
            self._long_lived_watch = asyncio.ensure_future(self._watch_long_lived())
        yield_ms = 10_000 if yield_time_s is None else int(yield_time_s * 1000)
        return await self._pty_update(process_id, entry, clamp_pty_yield_time_ms(yield_ms), max_output_tokens)

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        entry = self._long_lived.get(session_id)
        if entry is None:
            raise PtySessionNotFoundError(session_id=session_id)
        if chars:
            await entry.write(chars.encode())
        yield_ms = 250 if yield_time_s is None else int(yield_time_s * 1000)
        yield_ms = resolve_pty_write_yield_time_ms(yield_time_ms=yield_ms, input_empty=not chars)
        return await self._pty_update(session_id, entry, yield_ms, max_output_tokens)

    async def pty_terminate_all(self) -> None:
        entries = list(self._long_lived.values())
        self._long_lived.clear()
        await asyncio.gather(*(entry.kill() for entry in entries), return_exceptions=True)
        if self._long_lived_watch is not None:
            self._long_lived_watch.cancel()
            self._long_lived_watch = None

    async def _pty_update(
        self, process_id: int, entry: LongLived, yield_ms: int, max_output_tokens: int | None
    ) -> PtyExecUpdate:
        output, token_count, closed = await entry.collect(yield_ms, max_output_tokens)
        exit_code = entry.exit_code if closed else None
        if exit_code is not None:  # the SDK contract: an ended process is reported once, then gone
            if self._long_lived.get(process_id) is entry:
                del self._long_lived[process_id]
            await entry.kill()
        return PtyExecUpdate(
            process_id=None if exit_code is not None else process_id,
            output=output,
            exit_code=exit_code,
            original_token_count=token_count,
        )

    async def _watch_long_lived(self) -> None:
        """The workspace limit while long-lived processes run (commands have their own watchdog).

        limits: every 0.25 s, walking only when the sandbox ran or wrote since the last walk (or
        5 s have passed), and no sooner than the last walk took (see `disk`); over the
        limit, every long-lived process is killed with a note in its output.
        """
        loop = asyncio.get_running_loop()
        seen, walked = -1, 0.0
        while any(entry.alive for entry in self._long_lived.values()):
            pause = _LONG_LIVED_POLL_S
            now = await asyncio.to_thread(disk.activity, self._launcher.pid if self._launcher else None)
            if now != seen or loop.time() - walked > _LONG_LIVED_WALK_AT_LEAST_S:
                walked = loop.time()
                reason = await asyncio.to_thread(self._workspace_over_limit)
                if reason:
                    entries = list(self._long_lived.values())
                    await asyncio.gather(*(e.kill(reason) for e in entries), return_exceptions=True)
                    return
                seen = now
                pause = max(pause, loop.time() - walked)
            await asyncio.sleep(pause)

    # ------------------------------------------------------------------ files

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        rel = self._rel(path)
        try:
            fd = await asyncio.to_thread(tree.open_beneath, self.workspace_dir, rel, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise WorkspaceReadNotFoundError(path=path, cause=exc) from exc
        except OSError:
            return await self._read_in_sandbox(path, rel)
        return os.fdopen(fd, "rb")

    async def _read_in_sandbox(self, path: Path, rel: PurePosixPath) -> io.IOBase:
        """Paths through a symlink resolve inside the sandbox, where they cannot reach the host."""
        cap = self.state.limits.workspace_size
        target = f"{bwrap.WORKSPACE}/{rel}"
        outcome = await self.run_command(
            ["sh", "-c", 'test -f "$1" && exec cat -- "$1"', "sh", target],
            timeout=self.state.limits.timeout,
            output_cap=cap + 1,
        )
        if outcome.exit_code != 0:
            raise WorkspaceReadNotFoundError(path=path, context={"stderr": outcome.stderr[:4096]})
        if len(outcome.stdout) > cap:
            raise WorkspaceArchiveReadError(path=path, context={"reason": "larger than the workspace limit"})
        return io.BytesIO(outcome.stdout)

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        payload = coerce_write_payload(path=path, data=data)
        rel = self._rel(path, for_write=True)
        try:
            await self._mkdir_host(rel.parent)
            fd = await asyncio.to_thread(tree.open_beneath, self.workspace_dir, rel, _WRITE_FLAGS)
        except OSError:
            content = payload.stream.read()
            outcome = await self.run_command(
                ["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"', "sh",
                 f"{bwrap.WORKSPACE}/{rel}"],
                timeout=self.state.limits.timeout,
                stdin=content,
            )
            if outcome.exit_code != 0:
                raise WorkspaceArchiveWriteError(
                    path=Path(path), context={"stderr": outcome.stderr[:4096]}
                ) from None
            return
        await asyncio.to_thread(_copy_into, fd, payload.stream, self.state.limits.file_size, bwrap.host_id())

    async def mkdir(self, path: Path | str, *, parents: bool = False, user: str | User | None = None) -> None:
        rel = self._rel(path, for_write=True)
        try:
            await self._mkdir_host(rel, parents=parents)
        except OSError:
            await super().mkdir(path, parents=parents)

    async def _mkdir_host(self, rel: PurePosixPath, *, parents: bool = True) -> None:
        await asyncio.to_thread(
            tree.mkdir_beneath, self.workspace_dir, rel, parents=parents, owner=bwrap.host_id()
        )

    # ------------------------------------------------------------------ snapshots

    async def persist_workspace(self) -> io.IOBase:
        async with self._quiet:
            await self._quiet.wait_for(lambda: self._active_commands == 0 and not self._archiving)
            self._archiving = True
        try:
            skip = {PurePosixPath(p.as_posix()) for p in self._persist_workspace_skip_relpaths()}
            return await asyncio.to_thread(
                hostile_archive.archive,
                self.workspace_dir,
                skip=skip,
                max_bytes=self.state.limits.workspace_size,
            )
        except OSError as exc:
            raise WorkspaceArchiveReadError(path=Path(bwrap.WORKSPACE), cause=exc) from exc
        finally:
            async with self._quiet:
                self._archiving = False
                self._quiet.notify_all()

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        limit = self.state.limits.workspace_size
        try:
            await asyncio.to_thread(
                hostile_archive.safe_extract_tar, data, self.workspace_dir, max_bytes=limit  # type: ignore[arg-type]
            )
            ids = bwrap.host_id()
            if ids is not None:
                await asyncio.to_thread(tree.chown_tree, self.workspace_dir, ids)
        except (OSError, ValueError) as exc:
            raise WorkspaceArchiveWriteError(path=Path(bwrap.WORKSPACE), cause=exc) from exc


def _with_library_path(env: dict[str, str]) -> dict[str, str]:
    """`env` plus LD_LIBRARY_PATH when the runtime needs it to find libpython."""
    library_path = bwrap.runtime_library_path()
    return {**env, "LD_LIBRARY_PATH": library_path} if library_path else dict(env)


async def _feed_and_close(fd: int, data: bytes) -> None:
    try:
        await write_all(fd, data)
    finally:
        os.close(fd)


def _copy_into(fd: int, source: Any, max_bytes: int, owner: int | None) -> None:
    """Write an upload into a file opened beneath the workspace; files the host creates there
    belong to the sandbox's host uid (`owner`, when the host runs as root)."""
    if owner is not None:
        os.fchown(fd, owner, owner)
    with os.fdopen(fd, "wb") as out:
        try:
            tree.copy_bounded(source, out, max_bytes)
        except OverflowError:
            raise OSError(errno.EFBIG, "file larger than the sandbox file_size limit") from None


class LocalSandboxClient(BaseSandboxClient[LocalSandboxClientOptions | None]):
    """Creates `LocalSandboxSession`s; `delete` removes the session's host directory."""

    backend_id = "coderoom_local"
    supports_default_options = True

    def __init__(self, limits: Limits, bw: bwrap.Bwrap) -> None:
        self._limits = limits
        self._bwrap = bw

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: LocalSandboxClientOptions | None = None,
    ) -> SandboxSession:
        manifest = manifest if manifest is not None else Manifest()
        _check_manifest(manifest)
        self._validate_manifest_for_create(manifest)
        session_id = uuid.uuid4()
        state = LocalSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            host_dir=str(await asyncio.to_thread(_make_host_dir, self._limits.network)),
            limits=self._limits,
        )
        return self._wrap_session(LocalSandboxSession(state, self._bwrap))

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = session._inner
        if not isinstance(inner, LocalSandboxSession):
            raise TypeError("LocalSandboxClient.delete expects a LocalSandboxSession")
        await inner.stop_launcher()  # shutdown did already, unless it never ran
        if _owned_host_dir(inner.host_dir):
            await asyncio.to_thread(tree.remove_tree, inner.host_dir)
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        if not isinstance(state, LocalSandboxSessionState):
            raise TypeError("LocalSandboxClient.resume expects a LocalSandboxSessionState")
        _check_manifest(state.manifest)
        preserved = _owned_host_dir(Path(state.host_dir))
        if not preserved:  # never trust a path from serialized state: start a fresh directory
            state.host_dir = str(await asyncio.to_thread(_make_host_dir, self._limits.network))
            state.workspace_root_ready = False
        state.limits = self._limits  # limits come from the trusted spec, not from state
        inner = LocalSandboxSession(state, self._bwrap)
        inner._set_start_state_preserved(preserved)
        return self._wrap_session(inner)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, LocalSandboxSessionState)


def _check_manifest(manifest: Manifest) -> None:
    if manifest.root != bwrap.WORKSPACE:
        raise ValueError(f"the local sandbox's workspace is {bwrap.WORKSPACE}, not {manifest.root!r}")
    if manifest.extra_path_grants:
        raise ValueError("the local sandbox exposes /workspace only; extra path grants are not supported")


def _python_mounts(host_dir: Path) -> tuple[list[tuple[Path, str]], list[tuple[Path, Path]]]:
    """The runtime binds as bwrap will see them, and (as root) the host source -> view binds
    that make them reachable for uid 65534 (see `bwrap.views_namespace`)."""
    rt = bwrap.runtime()
    binds = rt.binds()
    views: list[tuple[Path, Path]] = []
    if bwrap.host_id() is not None:
        views = [(source, host_dir / f"python-{index}") for index, (source, _) in enumerate(binds)]
        binds = [(view, dest) for (_, view), (_, dest) in zip(views, binds)]
    if rt.venv_sites:  # the skeleton goes on top of nothing, the site-packages on top of it
        binds.insert(1, (host_dir / "venv", bwrap.VENV_MOUNT))
    return binds, views


def _make_host_dir(network: bool) -> Path:
    host_dir = Path(tempfile.mkdtemp(prefix=_HOST_DIR_PREFIX, dir=_host_parent()))  # mode 0700
    (host_dir / "workspace").mkdir(mode=0o700)
    bwrap.write_etc(host_dir / "etc", network)
    rt = bwrap.runtime()
    if rt.venv_sites:
        bwrap.write_venv(host_dir / "venv", rt)
    ids = bwrap.host_id()
    if ids is not None:  # bwrap runs as this uid and must reach the workspace
        for index in range(len(rt.binds())):
            (host_dir / f"python-{index}").mkdir(mode=0o755)  # mount points, see bwrap.views_namespace
        os.chown(host_dir, ids, ids)
        os.chown(host_dir / "workspace", ids, ids)
    return host_dir


def _host_parent() -> Path:
    """Where session directories go: the temp dir, unless (as root) bwrap's uid cannot walk to it.

    A TMPDIR inside a private folder (pytest's /tmp/pytest-of-root/..., a 0700 home) would make
    bwrap fail with "Can't find source path": then the first system temp dir it can reach.
    """
    temp = Path(tempfile.gettempdir())
    ids = bwrap.host_id()
    if ids is None:
        return temp
    for candidate in (temp, Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")):
        if _walkable(candidate, ids):
            return candidate
    raise SandboxUnavailable(
        f"the local sandbox needs a temp directory that uid {ids} can reach; "
        f"{temp}, /tmp, /var/tmp and /dev/shm are not. Set TMPDIR to one."
    )


def _walkable(path: Path, uid: int) -> bool:
    """Whether `uid` (= gid, no other groups) may search every directory from / down to `path`."""
    try:
        real = path.resolve(strict=True)
        chain = [real, *real.parents]
        stats = [os.stat(p) for p in chain]
    except OSError:
        return False
    for st in stats:
        if not stat.S_ISDIR(st.st_mode):
            return False
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == uid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _owned_host_dir(path: Path) -> bool:
    """Only a directory we made (our prefix, in the temp dir, ours, private) is reused or deleted."""
    try:
        parent = _host_parent()
    except SandboxUnavailable:
        return False
    if path.parent != parent or not path.name.startswith(_HOST_DIR_PREFIX):
        return False
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    owner = bwrap.host_id()
    owner = os.getuid() if owner is None else owner
    return stat.S_ISDIR(st.st_mode) and st.st_uid == owner and stat.S_IMODE(st.st_mode) == 0o700
