"""The local sandbox itself: bubblewrap isolation with no daemon and no root, with no Agents SDK.

One bwrap per sandbox runs a small launcher (`launcher_inner`) inside the sandbox's user,
network, UTS and cgroup namespaces. Every command gets fresh PID, mount and IPC namespaces of
its own, forked by the launcher from a slot it prepared in advance, with no capabilities, the
seccomp filter and the rlimits: about 6 ms less per command than a bwrap each. A command's
namespaces die with it, so a timeout kills its whole tree (setsid'd orphans included) and
nothing of it runs between commands (host-side file operations and archiving cannot race with
it). The launcher is out of the payload's reach (see `launcher_inner`); the host keeps its
control socket and every command's pipes (`launcher`). Shared by the commands of one sandbox,
as the processes of one container are: the network namespace (loopback and abstract unix
sockets: a shell command can reach a server the kernel process started) and the hostname.
Start is mostly the launcher's Python starting (about 20 ms here).

Long-lived processes (`start_process`: PTY sessions, the run_python kernel) run the same way,
optionally on a terminal made inside the sandbox, with the wall clock counted from their start
(none for the kernel, see `lifetimes`), killed by `stop_processes()`, on close, over the
workspace limit, or when this process dies (see `longlived`). Host-side walks of the workspace tolerate it changing the tree
meanwhile (`hostile.tree`).

The sandbox's Python is the host interpreter's (`bwrap.Runtime`): its base installation at
/opt/coderoom/python and, from a venv, a venv of its own at /opt/coderoom/venv with the host
venv's site-packages, all read-only; nothing else of the host's folders is visible.

What persists between commands is the workspace only: a host folder private to the sandbox
(in the session folder, see `host_dir`, deleted by `close`), bound at the sandbox's `root`
(/workspace unless the caller chose another path inside the sandbox, see `bwrap.root_problem`),
the commands' cwd.
/tmp and /dev/shm are fresh size-capped tmpfs per command, and HOME=/tmp, so login-shell or
Python start-up files written by one command are not read by the next one (catalogue SES-02).

Limits (see `Limits`):
* timeout: wall clock per command; the sandbox's pid 1 is SIGKILLed, the tree dies with it.
  The command returns exit code 124 (`EXIT_TIMEOUT`) with `timed_out` set.
* memory: a memory cgroup per sandbox where one can be had (`cgroup`): every process, tmpfs and
  shared memory count; at the limit the kernel kills in the command (exit 137, with a note
  naming the limit), and no address-space limit (mapped is not used: see
  `enforcement.address_space_limit`). Without a cgroup, RLIMIT_AS = memory per process only, and
  memfd_create/shmget are refused (`enforcement`).
* pids: RLIMIT_NPROC, set inside the sandbox's user namespace, so it counts the sandbox's
  tasks (threads included) and nothing of the host. Six of them are the sandbox's own while a
  command runs: bwrap's pid 1, the launcher, its preparer, the command's init, and the next
  slot's init and stub (more with concurrent commands); the preparer clones with the
  launcher's rlimits, so a command at the limit does not stop the next slot.
* cpu_time: RLIMIT_CPU per process; file_size: RLIMIT_FSIZE, at most workspace_size.
* A command that ran into cpu_time, file_size, pids or memory gets a `[coderoom: ...]` line
  naming the limit and its value at the end of its stderr, and `stopped_by` (see `stops`).
* workspace_size: the workspace by allocated blocks and apparent size, plus deleted files still
  held open (`disk`), polled every 0.25 s while a command runs and checked when it ends; over
  the limit the command is killed and fails with a message naming the limit. fallocate is
  refused. The overshoot is what one command can write in 0.25 s; also capped: 100 000 entries
  and 256 levels of directories.
* network: off, only lo; on, a namespace of its own through slirp4netns (`network`), never
  the host's. With an allowlist (`egress`), only lo too: the session's host proxy
  (`coderoom.egress.proxy`) listens on a Unix socket bound read-only into the sandbox, a
  forwarder started with each launcher (`egress/inside/forwarder`) relays 127.0.0.1:3128 to it,
  and every command's environment names it (HTTP_PROXY, ...). No resolver: DNS fails inside.
* output_bytes: per stream, head and tail kept, the middle replaced by a truncation marker.
* MAX_LIVE_PROCESSES long-lived processes at once; MAX_OPEN_FILES descriptors per process.
* a long-lived process has the same limits, timeout included (from its start), unless it is the
  run_python kernel (`lifetimes.LIVES_WITH_SESSION`).
"""

from __future__ import annotations

import asyncio
import errno
import io
import os
from collections.abc import Mapping, Sequence, Set
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING

from ...egress import session as egress_session
from ...errors import SandboxFailed
from ...hostile import tree
from ...hostile.names import safe_relative_path
from ..base import EXIT_KILLED, EXIT_TIMEOUT
from ..core import READ_IN_WORKSPACE, CommandResult
from ..live import MAX_LIVE_PROCESSES
from ..stops import named_stop, stop_note
from . import bwrap, disk, host_dir, network
from .launcher import LAUNCHER_LOST, Job, Launcher, LauncherError
from .longlived import LongLived
from .process import CappedBuffer, PipeReader, pump, supervise, write_all
from .spawn import BASE_ENV, SandboxPlan, Started, with_library_path

if TYPE_CHECKING:
    from ...hostile import snapshot as hostile_snapshot
    from ..limits import Limits

START_TIMEOUT_S = 30.0  # a session start that waits on bwrap or slirp4netns fails after this
PROCESS_POLL_S = 0.25  # how often the long-lived processes' workspace watchdog looks
PROCESS_WALK_AT_LEAST_S = 5.0  # and walks the workspace at least this often while they run
_PIPE_GRACE_S = 5.0  # after a command's namespace is gone, for its pipes to reach EOF
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
EXIT_EXISTS = 17  # CREATE_IN_SANDBOX: the name is taken
# `sh -c CREATE_IN_SANDBOX sh PATH`: stdin into a new file PATH, for a path whose parent passes
# through a symlink (resolved in the sandbox, where it cannot reach the host); refused when the
# name exists as anything, a dangling symlink included, and `set -C` opens O_EXCL
CREATE_IN_SANDBOX = (
    'if [ -e "$1" ] || [ -L "$1" ]; then exit 17; fi; '
    'mkdir -p -- "$(dirname -- "$1")" && set -C && exec cat > "$1"'
)

class LocalSandbox(SandboxPlan):
    """A local sandbox over one host folder; `coderoom.sandboxes.core.Sandbox` and more.

    Beyond the core protocol: `open_file` (a stream rather than bytes), `make_dir`,
    `archive(skip=...)`, long-lived processes and `stop`, which the SDK adapter needs.
    """

    def __init__(
        self, limits: Limits, bw: bwrap.Bwrap, folder: Path, *, root: str = bwrap.WORKSPACE, packages: Path | None = None
    ) -> None:
        super().__init__(limits, bw, folder, root=root, packages=packages)
        self._active_commands = 0
        self._archiving = False
        self._quiet = asyncio.Condition()
        self._egress: network.Egress | None = None  # with network on, stopped with the launcher
        self._proxy: egress_session.EgressSession | None = None  # with an allowlist, stopped by `close`
        self._forwarder: list[asyncio.Future[None]] = []  # its output pumps, with the launcher
        self._command_env = with_library_path(BASE_ENV)
        if limits.egress is not None:
            bundle = egress_session.bundle_path(limits.egress, bwrap.EGRESS_DIR)
            self._command_env.update(egress_session.sandbox_env(bundle=bundle))
        self._launcher: Launcher | None = None
        self._launcher_lock = asyncio.Lock()
        self._processes: list[LongLived] = []
        self._processes_watch: asyncio.Task[None] | None = None

    @classmethod
    async def create(cls, limits: Limits, bw: bwrap.Bwrap, packages: Path | None = None) -> LocalSandbox:
        """A sandbox in a new host folder; not started (see `start`)."""
        try:
            folder = await asyncio.to_thread(host_dir.make, packages, egress=limits.egress is not None)
        except OSError as exc:  # no temp dir has room (L-S10): said as any failed start, no traceback
            raise SandboxFailed(f"cannot make the sandbox's host folder: {exc}") from exc
        return cls(limits, bw, folder, packages=packages)

    @classmethod
    def adopt(cls, plan: SandboxPlan, started: Started) -> LocalSandbox:
        """The sandbox `spawn.prestart` planned and whose launcher it started (in an event loop)."""
        sandbox = cls(plan.limits, plan._bwrap, plan.host_dir, packages=plan.packages)
        sandbox._launch_cache, sandbox._memory, sandbox._namespace_fd = plan._launch_cache, plan._memory, plan._namespace_fd
        sandbox._launcher = Launcher.adopt(started)
        return sandbox

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the launcher (again, after `stop`); SandboxFailed if bubblewrap cannot start."""
        if not self.workspace_dir.is_dir():
            raise SandboxFailed(f"the local sandbox's workspace {self.workspace_dir} is gone")
        await self._ensure_launcher()

    async def _ensure_launcher(self) -> Launcher:
        """The sandbox's launcher, (re)started if it is not running."""
        async with self._launcher_lock:
            if self._launcher is None or not self._launcher.alive:
                if self._launcher is not None:
                    await self._launcher.close()
                self._launcher = None
                if self.limits.egress is not None and self._proxy is None:
                    await self._start_proxy()
                try:
                    self._launcher = Launcher.adopt(self._spawn())
                except OSError as exc:
                    raise SandboxFailed(f"cannot start bubblewrap: {exc}") from exc
                if self.limits.network:
                    await self._attach_network(self._launcher)
                elif self.limits.egress is not None:
                    await self._start_forwarder(self._launcher)
            return self._launcher

    async def _start_proxy(self) -> None:
        """The session's egress proxy on its socket in the session folder (see `egress.session`)."""
        assert self.limits.egress is not None
        proxy = egress_session.EgressSession(
            self.limits.egress, self.host_dir / host_dir.EGRESS_SOCKET,
            max_bytes=self.limits.egress_bytes, max_connections=self.limits.egress_connections,
        )  # fmt: skip
        try:
            (self.host_dir / host_dir.EGRESS_SOCKET).parent.mkdir(mode=0o755, exist_ok=True)  # a resumed folder
        except OSError as exc:
            raise SandboxFailed(f"cannot start the egress proxy: {exc}") from exc
        await proxy.start()
        self._proxy = proxy

    def watch_egress(self, listener: egress_session.EgressListener) -> None:
        """Hand each connection attempt through the proxy to `listener` (nothing without an allowlist)."""
        if self._proxy is not None:
            self._proxy.watch(listener)

    async def _start_forwarder(self, launcher: Launcher) -> None:
        """Start the in-sandbox forwarder on the new launcher and wait until it listens, within
        START_TIMEOUT_S; on any failure, or a cancel, the launcher is killed again."""
        for task in self._forwarder:
            task.cancel()
        out, err = CappedBuffer(4096), CappedBuffer(4096)
        ready = asyncio.Event()

        def seen(data: bytes) -> None:
            out.feed(data)
            if b"ready\n" in out.value():
                ready.set()

        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                if not await launcher.wait_ready():
                    raise SandboxFailed(launcher.failure())
                argv = egress_session.forwarder_command(
                    bwrap.runtime().sandbox_interpreter, f"{bwrap.EGRESS_DIR}/{PurePosixPath(host_dir.EGRESS_SOCKET).name}"
                )
                job = launcher.start_job(argv, self._command_env, stdin=False)
                self._forwarder = [asyncio.ensure_future(pump(job.stdout, seen)), asyncio.ensure_future(pump(job.stderr, err.feed))]
                waiting = asyncio.ensure_future(ready.wait())
                either: list[asyncio.Future[object]] = [waiting, job.exited]  # type: ignore[list-item]
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                if not ready.is_set():
                    detail = err.value()[-1000:].decode(errors="replace").strip()
                    raise SandboxFailed(f"the sandbox's egress forwarder did not start: {detail or 'no reason given'}")
        except BaseException as exc:
            await asyncio.shield(launcher.close())
            if isinstance(exc, TimeoutError):
                raise SandboxFailed(f"the egress forwarder did not start within START_TIMEOUT_S = {START_TIMEOUT_S:g} s") from exc
            if isinstance(exc, LauncherError):
                raise SandboxFailed(str(exc)) from exc
            raise

    async def _attach_network(self, launcher: Launcher) -> None:
        """Give the new launcher's namespace its slirp4netns (see `network`) within
        START_TIMEOUT_S; on any failure, or a cancel, the launcher is killed again."""
        if self._egress is not None:
            await asyncio.to_thread(self._egress.close)
            self._egress = None
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                pid = await launcher.sandbox_pid()
                if pid is None:
                    await launcher.close()  # reaps bwrap and collects its stderr
                    raise SandboxFailed(f"the sandbox exited before its network was set up: {launcher.failure()}")
                self._egress = await network.Egress.attach(pid)
        except BaseException as exc:
            await asyncio.shield(launcher.close())
            if isinstance(exc, TimeoutError):
                raise SandboxFailed(
                    f"the sandbox's network was not set up within START_TIMEOUT_S = {START_TIMEOUT_S:g} s"
                ) from exc
            raise

    async def stop(self) -> None:
        """Stop the launcher (every command and long-lived process dies with it); the workspace
        stays, and the next command starts a new launcher."""
        await self.stop_processes()
        async with self._launcher_lock:
            if self._launcher is not None:
                await self._launcher.close()
                self._launcher = None
        if self._egress is not None:
            await asyncio.to_thread(self._egress.close)
            self._egress = None
        await asyncio.to_thread(self._release_launch)

    async def close(self) -> None:
        """Stop everything (the egress proxy too) and delete the host folder (only one
        `host_dir` made). Idempotent."""
        await self.stop()
        for task in self._forwarder:
            task.cancel()
        if self._proxy is not None:
            await self._proxy.close()
            self._proxy = None
        if host_dir.owned(self.host_dir):
            await asyncio.to_thread(tree.remove_tree, self.host_dir)

    # ------------------------------------------------------------------ commands

    async def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        output_cap: int | None = None,
    ) -> CommandResult:
        """Run `argv` in fresh namespaces; timeouts and the workspace limit are reported in-band.

        `timeout` may only shorten `limits.timeout`; `output_cap` replaces `limits.output_bytes`.
        """
        limit = self.limits.timeout
        timeout = limit if timeout is None else min(timeout, limit)
        cap = output_cap or self.limits.output_bytes
        out, err = CappedBuffer(cap), CappedBuffer(cap)
        async with self._quiet:
            await self._quiet.wait_for(lambda: not self._archiving)
            self._active_commands += 1
        try:
            job = await self._start_job(list(argv), env, stdin=stdin is not None)
            oom_kills = self._memory.oom_kills() if self._memory else 0
            readers = [PipeReader(job.stdout, out.feed), PipeReader(job.stderr, err.feed)]
            pending: list[asyncio.Future[None]] = [reader.eof for reader in readers]
            if job.stdin is not None:
                pending.append(asyncio.ensure_future(_feed_and_close(job.stdin, stdin or b"")))
            try:
                timed_out, stopped_by = await supervise(
                    job.exited, job.kill, timeout=timeout, watchdog=self.workspace_overrun
                )
                # the namespace is gone, so the pipes reach EOF promptly (mostly already); bound it anyway
                pending = [future for future in pending if not future.done()]
                if pending:
                    await asyncio.wait(pending, timeout=_PIPE_GRACE_S)
            finally:
                if not job.exited.done():  # cancelled: never leave a command behind
                    await asyncio.shield(job.kill())
                for reader in readers:
                    reader.close()
                for future in pending:
                    future.cancel()
            if stopped_by is None:  # inline: a thread hop costs more than a usual walk
                stopped_by = self._workspace_over_limit(held=not self._payload_gone(job))
        finally:
            async with self._quiet:
                self._active_commands -= 1
                self._quiet.notify_all()
        if job.exited.result() == LAUNCHER_LOST and not job.launcher.started:
            raise SandboxFailed(job.launcher.failure())
        result = CommandResult(job.exited.result(), out.value(), err.value(), timed_out, stopped_by)
        if job.lost:  # its exit code is the launcher's LAUNCHER_LOST: say so, and why
            result.stderr += stop_note(f"{job.launcher.failure()}; the next command starts another")
        memory_note = self._memory.oom_note(oom_kills) if self._memory else None
        if memory_note:
            result.stderr += stop_note(memory_note)
        if result.timed_out:
            result.exit_code = EXIT_TIMEOUT
            result.stopped_by = f"the {timeout:g} s wall-clock limit"
            result.stderr += stop_note(f"killed after the {timeout:g} s wall-clock limit")
        elif result.stopped_by:
            result.exit_code = result.exit_code or 1
            if result.exit_code == EXIT_KILLED:
                result.exit_code = 1  # we killed it for disk, not memory
            result.stderr += stop_note(result.stopped_by)
        elif memory_note:  # named above by the cgroup; listed at the run's end
            result.stopped_by = memory_note
        else:  # cpu_time, file_size, pids, memory named from how the command ended
            result.stopped_by = named_stop(result.exit_code, result.stderr, self.limits)
            if result.stopped_by:
                result.stderr += stop_note(result.stopped_by)
        return result

    async def _start_job(
        self, argv: list[str], env: Mapping[str, str] | None, *, stdin: bool, tty: bool = False
    ) -> Job:
        """Hand `argv` to the sandbox's launcher, starting the launcher first if needed."""
        launcher = await self._ensure_launcher()
        if not await launcher.wait_ready():
            await launcher.close()  # reaps bwrap and collects its stderr
            raise SandboxFailed(launcher.failure())
        try:
            return launcher.start_job(argv, {**self._command_env, **(env or {})}, stdin=stdin, tty=tty)
        except LauncherError as exc:
            await launcher.close()
            raise SandboxFailed(str(exc)) from exc

    async def workspace_overrun(self) -> str | None:
        """Why the workspace is over its limit now (see `disk`), or None."""
        return await asyncio.to_thread(self._workspace_over_limit)

    def _workspace_over_limit(self, *, held: bool = True) -> str | None:
        """`held=False` skips the look for deleted files still open: only when no payload process
        is left to hold one (`_payload_gone`)."""
        launcher = self._launcher.pid if self._launcher and held else None  # its processes' open files count
        return disk.over_limit(self.workspace_dir, self.limits.workspace_size, launcher)

    @staticmethod
    def _payload_gone(job: Job) -> bool:
        """Whether `job` ended by its launcher's report (not lost) and its launcher has no
        other job left (no other command, long-lived process or forwarder): then the sandbox
        holds no payload process, so no deleted file can still be open and the check after a
        command walks the workspace only. Most of that check was reading /proc/PID/maps of the
        next slot's stub, a copy of the launcher (issue 25)."""
        return job.exited.result() != LAUNCHER_LOST and job.launcher.settled

    # ------------------------------------------------------------------ long-lived processes

    async def start_process(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        tty: bool = False,
        lifetime: float | None = None,
        channel_cap: int | None = None,
    ) -> LongLived:
        """Start a process that outlives this call (a PTY session, the kernel): see `longlived`.

        With `tty` it runs on a terminal made inside the sandbox and takes input; with
        `channel_cap` its stdin is a pipe and its output is kept up to that many bytes (the
        kernel's channel, `PtySessions.start_channel`); otherwise its stdin is /dev/null. It runs until it exits, `lifetime` seconds (None: no wall clock),
        `stop_processes()` or the sandbox stops; the workspace limit holds too. It never holds
        up `archive`. Ended processes are released at the next start; at most MAX_LIVE_PROCESSES
        run at once (SandboxFailed beyond).
        """
        live = [entry for entry in self._processes if entry.alive]
        if len(live) >= MAX_LIVE_PROCESSES:
            raise SandboxFailed(f"{MAX_LIVE_PROCESSES} long-lived processes already run")
        for entry in self._processes:
            if not entry.alive:
                await entry.kill()
        job = await self._start_job(list(argv), env, stdin=tty or channel_cap is not None, tty=tty)
        process = LongLived(job, channel_cap or self.limits.output_bytes, lifetime=lifetime, tty=tty)
        self._processes = [*live, process]
        if self._processes_watch is None or self._processes_watch.done():
            self._processes_watch = asyncio.ensure_future(self._watch_processes())
        return process

    async def end_process(self, process: LongLived) -> None:
        """Kill `process` (if it still runs) and forget it."""
        if process in self._processes:
            self._processes.remove(process)
        await process.kill()

    async def stop_processes(self) -> None:
        """Kill every long-lived process."""
        entries, self._processes = self._processes, []
        await asyncio.gather(*(entry.kill() for entry in entries), return_exceptions=True)
        if self._processes_watch is not None:
            self._processes_watch.cancel()
            self._processes_watch = None

    async def _watch_processes(self) -> None:
        """The workspace limit while long-lived processes run (commands have their own watchdog).

        Every PROCESS_POLL_S, looking only when the sandbox ran or wrote since the last full walk
        (or PROCESS_WALK_AT_LEAST_S have passed). The full walk (sizes, held files: see `disk`)
        runs in a thread beside the polls, and the next one starts no sooner than the last one
        took after it ended; meanwhile every such poll takes the quick entry count, so a loop
        creating files is caught while a walk of a large tree is still under way. Over the limit,
        every long-lived process is killed with a note in its output.
        """
        loop = asyncio.get_running_loop()
        seen, walked, next_walk = -1, 0.0, 0.0
        walk: asyncio.Future[str | None] | None = None
        try:
            while any(entry.alive for entry in self._processes):
                now = await asyncio.to_thread(disk.activity, self._launcher.pid if self._launcher else None)
                reason = None
                try:  # a walk that fails (EMFILE, EACCES) stops the processes: never an unwatched kernel
                    if walk is not None and walk.done():
                        reason, walk = walk.result(), None
                        next_walk = loop.time() + (loop.time() - walked)
                    if not reason and (now != seen or loop.time() - walked > PROCESS_WALK_AT_LEAST_S):
                        if walk is None and loop.time() >= next_walk:  # activity is seen once a walk looks
                            seen, walked = now, loop.time()
                            walk = asyncio.ensure_future(asyncio.to_thread(self._workspace_over_limit))
                        else:
                            reason = await asyncio.to_thread(disk.too_many_entries, self.workspace_dir)
                except OSError as exc:
                    reason = f"the workspace could not be checked ({exc.strerror or exc}); command stopped"
                if reason:
                    entries = list(self._processes)
                    await asyncio.gather(*(e.kill(reason, exit_code=1) for e in entries), return_exceptions=True)
                    return
                await asyncio.sleep(PROCESS_POLL_S)
        finally:
            if walk is not None:
                walk.cancel()

    # ------------------------------------------------------------------ files

    async def open_file(self, path: PurePosixPath, *, max_bytes: int | None = None, whole: bool = True) -> IO[bytes]:
        """A workspace file to read. Never through a symlink on the host: a path through one is
        read inside the sandbox (where links cannot reach the host), and only when it resolves
        to a regular file under the workspace (not /proc/self/pagemap, say), at most `max_bytes`
        (default workspace_size). FileNotFoundError if absent; OverflowError past the bound, unless
        `whole` is False (the caller wants a prefix)."""
        rel = _checked(path)
        try:
            fd = await asyncio.to_thread(tree.open_beneath, self.workspace_dir, rel, os.O_RDONLY)
        except FileNotFoundError:
            raise
        except OSError:
            cap = self.limits.workspace_size if max_bytes is None else max_bytes
            return await self._open_in_sandbox(rel, cap, whole=whole)
        return os.fdopen(fd, "rb")

    async def _open_in_sandbox(self, rel: PurePosixPath, cap: int, *, whole: bool) -> IO[bytes]:
        result = await self.exec(
            ["sh", "-c", READ_IN_WORKSPACE, "sh", f"{self.root}/{rel}", self.root, str(cap + 1)],
            output_cap=cap + 1,
        )
        if result.exit_code != 0:
            detail = result.stderr[:4096].decode(errors="replace").strip()
            raise FileNotFoundError(errno.ENOENT, detail or "not a regular file in the workspace", str(rel))
        if len(result.stdout) > cap and whole:
            raise OverflowError(f"{rel}: larger than {cap} bytes")
        return io.BytesIO(result.stdout[:cap])

    async def read_prefix(self, path: PurePosixPath, *, max_bytes: int) -> bytes:
        """At most the first `max_bytes` of a workspace file (the SDK's `read_bounded`)."""
        with await self.open_file(path, max_bytes=max_bytes, whole=False) as source:
            return await asyncio.to_thread(source.read, max_bytes)

    async def read_file(self, path: PurePosixPath, *, max_bytes: int) -> bytes:
        with await self.open_file(path, max_bytes=max_bytes) as source:
            data = await asyncio.to_thread(source.read, max_bytes + 1)
        if len(data) > max_bytes:
            raise OverflowError(f"{path}: larger than {max_bytes} bytes")
        return data

    async def write_file(self, path: PurePosixPath, data: bytes | IO[bytes]) -> None:
        """Create or replace a workspace file (parents made) on the host, never through a
        symlink; a path through one is written inside the sandbox. OSError on failure (EFBIG
        past file_size)."""
        rel = _checked(path)
        if isinstance(data, bytes):
            data = io.BytesIO(data)
        try:
            await self.make_dir(rel.parent, parents=True)
            fd = await asyncio.to_thread(tree.open_beneath, self.workspace_dir, rel, _WRITE_FLAGS)
        except OSError:
            result = await self.exec(
                ["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"', "sh", f"{self.root}/{rel}"],
                stdin=data.read(self.limits.file_size + 1),
            )
            if result.exit_code != 0:
                detail = result.stderr[:4096].decode(errors="replace").strip()
                raise OSError(errno.EIO, f"writing {rel} inside the sandbox failed: {detail}") from None
            return
        await asyncio.to_thread(_copy_into, fd, data, self.limits.file_size, bwrap.host_id())

    async def create_file(self, path: PurePosixPath, data: bytes | IO[bytes]) -> None:
        """Create a new workspace file (parents made): FileExistsError when the name exists as
        anything, a dangling symlink included (apply_patch's "Add File"). O_EXCL|O_NOFOLLOW on
        the host; a parent through a symlink is handled inside the sandbox."""
        rel = _checked(path)
        if isinstance(data, bytes):
            data = io.BytesIO(data)
        try:
            await self.make_dir(rel.parent, parents=True)
            parent_fd = await asyncio.to_thread(tree.open_dir_beneath, self.workspace_dir, rel.parts[:-1])
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            await self._create_in_sandbox(rel, data)
            return
        try:
            fd = os.open(rel.name, _CREATE_FLAGS, 0o644, dir_fd=parent_fd)
        finally:
            os.close(parent_fd)
        await asyncio.to_thread(_copy_into, fd, data, self.limits.file_size, bwrap.host_id())

    async def _create_in_sandbox(self, rel: PurePosixPath, data: IO[bytes]) -> None:
        result = await self.exec(
            ["sh", "-c", CREATE_IN_SANDBOX, "sh", f"{self.root}/{rel}"], stdin=data.read(self.limits.file_size + 1)
        )
        if result.exit_code == EXIT_EXISTS:
            raise FileExistsError(errno.EEXIST, "the name exists in the workspace", str(rel))
        if result.exit_code != 0:
            detail = result.stderr[:4096].decode(errors="replace").strip()
            raise OSError(errno.EIO, f"creating {rel} inside the sandbox failed: {detail}")

    async def make_dir(self, path: PurePosixPath, *, parents: bool) -> None:
        """`mkdir [-p]` on the host, never through a symlink (OSError: callers may retry inside)."""
        rel = _checked(path, root_ok=True)
        await asyncio.to_thread(tree.mkdir_beneath, self.workspace_dir, rel, parents=parents, owner=bwrap.host_id())

    # ------------------------------------------------------------------ archives

    async def archive(self, *, skip: Set[PurePosixPath] = frozenset(), snapshot: bool = False) -> IO[bytes]:
        """A tar of the workspace but `skip`, made once no command runs (long-lived processes
        may); bounded by workspace_size. OSError if the workspace cannot be read. A `snapshot`
        (for `restore_snapshot`) keeps hard links and rebases absolute in-workspace symlinks."""
        async with self._quiet:
            await self._quiet.wait_for(lambda: self._active_commands == 0 and not self._archiving)
            self._archiving = True
        from ...hostile import archive as hostile_archive  # tarfile: not for a sandbox that never archives

        try:
            return await asyncio.to_thread(
                hostile_archive.archive,
                self.workspace_dir,
                skip=set(skip),
                max_bytes=self.limits.workspace_size,
                snapshot_root=self.root if snapshot else None,
            )
        finally:
            async with self._quiet:
                self._archiving = False
                self._quiet.notify_all()

    async def hydrate(self, tar: IO[bytes]) -> None:
        """Unpack `tar` with the hardened extraction; OSError or ValueError if it is refused."""
        from ...hostile import archive as hostile_archive

        limit = self.limits.workspace_size
        await asyncio.to_thread(hostile_archive.extract_into_sandbox, tar, self.workspace_dir, max_bytes=limit)
        ids = bwrap.host_id()
        if ids is not None:
            await asyncio.to_thread(tree.chown_tree, self.workspace_dir, ids)

    async def restore_snapshot(self, tar: IO[bytes]) -> None:
        """Restore a snapshot exactly (`hostile.snapshot`: modes, hard links, in-workspace
        symlinks): checked whole before anything is written, then written on the host without
        following a symlink, every entry owned by the sandbox's host uid. SnapshotRefused names
        the member and the reason; nothing is written then."""
        from ...hostile import snapshot as hostile_snapshot  # tarfile: only for a snapshot

        checked = await asyncio.to_thread(hostile_snapshot.check, tar, max_bytes=self.limits.workspace_size)
        try:
            await self.restore_checked(checked)
        finally:
            checked.close()

    async def restore_checked(self, checked: hostile_snapshot.Snapshot) -> None:
        """Write a snapshot `hostile_snapshot.check` accepted (see `restore_snapshot`)."""
        from ...hostile import snapshot as hostile_snapshot

        await asyncio.to_thread(hostile_snapshot.restore, checked, self.workspace_dir, owner=bwrap.host_id())


def _checked(path: PurePosixPath, *, root_ok: bool = False) -> PurePosixPath:
    """`path` as a plain workspace-relative path (UnsafePath if it could leave the workspace)."""
    if root_ok and str(path) in ("", "."):
        return PurePosixPath(".")
    return safe_relative_path(str(path))


async def _feed_and_close(fd: int, data: bytes) -> None:
    try:
        await write_all(fd, data)
    finally:
        os.close(fd)


def _copy_into(fd: int, source: IO[bytes], max_bytes: int, owner: int | None) -> None:
    """Write an upload into a file opened beneath the workspace; files the host creates there
    belong to the sandbox's host uid (`owner`, when the host runs as root)."""
    if owner is not None:
        os.fchown(fd, owner, owner)
    with os.fdopen(fd, "wb") as out:
        try:
            tree.copy_bounded(source, out, max_bytes)
        except OverflowError:
            raise OSError(errno.EFBIG, "file larger than the sandbox file_size limit") from None
