"""The synchronous half of starting a local sandbox: everything up to bwrap running the launcher,
with no asyncio (importing asyncio takes about 20 ms here, as long as bwrap and the launcher's
Python take to start in the sandbox).

`SandboxPlan` holds what a sandbox is made of on the host (its folder, the seccomp filter, the
runtime binds) and makes the rest on first use: the launch (memory cgroup, as root the views
namespace), bwrap's arguments and the launcher's settings. bwrap is born in the memory cgroup
where it can be (cgroup v1), and its pid 1 waits at the gate until a thread has made sure it is
there (`gate`). `LocalSandbox` is a plan with an
event loop. `spawn_launcher` starts bwrap running the launcher; `launcher.Launcher.adopt` then
watches it from the loop. `prestart` does all of it for a one-command sandbox before the caller
loads asyncio (`LocalBackend.prestart`, used by `coderoom sandbox run`), so the launcher starts
on one core while the host loads on the other; nothing of the sandbox differs.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.machinery
import importlib.util
import marshal
import os
import resource
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import CodeType

from ... import signal_masks
from ...errors import UsageError
from ..limits import CPU_KILL_GRACE_S, Limits
from ..seccomp import host_arch
from . import bwrap, enforcement, host_dir, leases, procfs
from .cgroup import MemoryCgroup
from .gate import Admission, Gate, GatePipes
from .status import StatusPipe

MAX_OPEN_FILES = 512  # RLIMIT_NOFILE of every sandbox process
KILL_WAIT_S = 5.0  # for an abandoned bwrap to exit once it is killed
LAUNCHER_PATH = f"{bwrap.OWN_DIR}/launcher.pyc"
SECCOMP_PATH = f"{bwrap.OWN_DIR}/seccomp.bpf"
SETTINGS_PATH = f"{bwrap.OWN_DIR}/launcher.settings"
LAUNCHER_SOURCE = Path(__file__).with_name("inside") / "launcher_inner.py"  # not importlib.resources: 5 ms to import

BASE_ENV = {
    "PATH": ":".join(
        dict.fromkeys(
            # the venv's bin first: a sandbox with a package environment has one on any host
            [f"{bwrap.VENV_MOUNT}/bin", bwrap.runtime().bin_dir, f"{bwrap.RUNTIME_MOUNT}/bin", "/usr/local/bin", "/usr/bin", "/bin"]
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


@dataclass(frozen=True)
class Settings:
    """What every command of a session gets (see launcher_inner)."""

    seccomp: bytes  # the BPF program
    clone_nr: int  # clone(2)'s number on this architecture
    rlimits: list[tuple[int, int, int]]  # (resource.RLIMIT_*, soft, hard)
    tmp_size: int  # bytes, for each command's /tmp and /dev/shm
    workspace: str  # the workspace inside the sandbox: each command's cwd


@dataclass
class Started:
    """A bwrap running the launcher, not yet watched by an event loop (see `Launcher.adopt`)."""

    popen: subprocess.Popen[bytes]
    status: StatusPipe  # bwrap's --json-status-fd, read end
    stderr: int  # bwrap's stderr, read end
    sock: socket.socket  # the launcher's control socket, host end (non-blocking)
    admission: Admission | None  # its pid 1 at the gate (see `gate`); None: not gated here

    def close(self) -> None:
        """Never adopted: kill the sandbox (`kill_sandbox`) and reap bwrap (so its memory cgroup
        empties), as `BwrapProcess.kill` does, bounded by KILL_WAIT_S."""
        kill_sandbox(self.popen, self.status.child_pid())
        try:
            self.popen.wait(KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        kill_late_init(self.status)
        self.status.close()
        if self.admission is not None:
            self.admission.close()
        os.close(self.stderr)
        self.sock.close()


class SandboxPlan:
    """A local sandbox's host side before any event loop: see the module docstring."""

    def __init__(
        self, limits: Limits, bw: bwrap.Bwrap, folder: Path, *, root: str = bwrap.WORKSPACE, packages: Path | None = None
    ) -> None:
        """`packages`: a built package environment's site-packages, bound read-only (see `packages`)."""
        problem = bwrap.root_problem(root)
        if problem:
            raise UsageError(f"the local sandbox cannot put its workspace at {root!r}: {problem}")
        self.limits = limits
        self.host_dir = folder
        self.root = str(PurePosixPath(root))  # the workspace inside the sandbox; never a host path
        self._bwrap = bw
        arch = host_arch()
        assert arch is not None  # unavailable_reason() refuses such hosts
        self._seccomp = enforcement.seccomp_filter(arch)
        self._clone_nr = arch.table["clone"]
        self.packages = packages
        self._python, self._views = host_dir.python_mounts(folder, packages)
        rt = bwrap.runtime()
        self._venv = bwrap.venv_config(rt, packages=packages is not None) if rt.venv_sites or packages is not None else None
        self._launch_cache: bwrap.Launch | None = None
        self._memory: MemoryCgroup | None = None  # made with the launch, removed after it
        self._namespace_fd = -1

    @property
    def workspace_dir(self) -> Path:
        return self.host_dir / "workspace"

    def _launch(self) -> bwrap.Launch:
        """Made on first use: as root, the mount namespace with the runtime views (see bwrap)."""
        if self._launch_cache is None:
            self._memory = MemoryCgroup.for_session(self.limits.memory, self.host_dir / host_dir.CGROUP_FILE)
            if bwrap.host_id() is None:
                self._launch_cache = bwrap.direct(self._bwrap)
            else:
                self._namespace_fd = bwrap.views_namespace(self._views)
                self._launch_cache = bwrap.as_unprivileged(self._bwrap, self._namespace_fd)
        return self._launch_cache

    def _release_launch(self) -> None:
        """Undo `_launch` once its bwrap has exited: the namespace fd and the memory cgroup."""
        self._launch_cache = None
        if self._namespace_fd >= 0:
            os.close(self._namespace_fd)
            self._namespace_fd = -1
        if self._memory is not None:
            self._memory.remove()
            self._memory = None

    def _bwrap_args(self) -> list[str]:
        mounts = bwrap.Mounts(
            workspace_dir=self.workspace_dir,
            root=self.root,
            python=self._python,
            venv=self._venv is not None,
            tmp_size=self.limits.tmp_size,
            tls=self.limits.network or self.limits.egress is not None,
            egress_dir=None if self.limits.egress is None else (self.host_dir / host_dir.EGRESS_SOCKET).parent,
        )
        launcher_env = with_library_path({"PATH": BASE_ENV["PATH"], "LANG": "C.UTF-8"})
        return bwrap.build_args(self._bwrap, mounts, launcher_env)

    def _root_files(self) -> dict[str, bytes]:
        """What bwrap writes into the sandbox's root besides the launcher's files (`bwrap.root_files`)."""
        return bwrap.root_files(self.limits.network, self._venv)

    def _settings(self) -> Settings:
        limits = self.limits
        file_size = min(limits.file_size, limits.workspace_size)
        address_space = enforcement.address_space_limit(limits.memory, counted_by_cgroup=self._memory is not None)
        rlimits = [
            (resource.RLIMIT_CORE, 0, 0),
            (resource.RLIMIT_NOFILE, MAX_OPEN_FILES, MAX_OPEN_FILES),
            (resource.RLIMIT_CPU, limits.cpu_time, limits.cpu_time + CPU_KILL_GRACE_S),
            (resource.RLIMIT_FSIZE, file_size, file_size),  # no file outgrows the workspace
            (resource.RLIMIT_AS, address_space, address_space),
            (resource.RLIMIT_NPROC, limits.pids, limits.pids),
        ]
        return Settings(self._seccomp, self._clone_nr, rlimits, limits.tmp_size, self.root)

    def _spawn(self) -> Started:
        launch = self._launch()
        gate = Gate(self._memory, bwrap.host_id())
        started = spawn_launcher(
            launch, self._bwrap_args(), bwrap.runtime().sandbox_interpreter, self._settings(), gate, self._root_files()
        )
        leases.record_group(self.host_dir / host_dir.BWRAP_FILE, started.popen.pid)  # for `prune` (see `leases`)
        return started


def prestart(limits: Limits, packages: Path | None = None) -> tuple[SandboxPlan, Started] | None:
    """A new sandbox's plan and its bwrap already running the launcher, or None when that cannot
    be done here and now (no usable bwrap, network on, an OSError: `LocalSandbox.start` then does
    it all and reports why). Everything made is removed again on failure.

    The probes come first and with SIGINT/SIGTERM/SIGHUP let through: the caller holds them back
    while this makes things (`signal_masks.held`), and a probe that hangs takes up to its timeout
    (10 s a program); nothing is made yet, and their answers are kept for `_launch`."""
    with signal_masks.let_through():
        bw, _ = bwrap.probe()
        if bw is None or limits.network or limits.egress is not None:
            return None
    try:
        folder = host_dir.make(packages)
    except OSError:
        return None
    plan = None
    try:
        plan = SandboxPlan(limits, bw, folder, packages=packages)
        return plan, plan._spawn()
    except BaseException as exc:
        if plan is not None:
            plan._release_launch()
        from ...hostile import tree

        tree.remove_tree(folder)
        if isinstance(exc, OSError):
            return None
        raise


def spawn_launcher(
    launch: bwrap.Launch, args: list[str], python: str, settings: Settings, gate: Gate, root_files: dict[str, bytes]
) -> Started:
    """Start bwrap with `args` running the launcher under `python`, its pid 1 held at `gate` until
    admitted (when the gate is needed here). The launcher's files and `root_files` (sandbox path
    -> content) are passed as memfds that bwrap copies into the sandbox's root (read-only once
    set up, like the rest of it), with no mount each."""
    config = marshal.dumps(
        {
            "clone_nr": settings.clone_nr,
            "rlimits": settings.rlimits,
            "tmp_size": settings.tmp_size,
            "workspace": settings.workspace,
            "admitted": gate.cgroup_line,  # the launcher checks it (bwrap goes on at EOF too, see `gate`)
        }
    )
    contents = {LAUNCHER_PATH: _compiled_launcher(), SECCOMP_PATH: settings.seccomp, SETTINGS_PATH: config, **root_files}
    # each fd made is closed if a later one cannot be (a host out of fds, L-S6): none kept
    pipes = GatePipes() if gate.needed else None
    host_end = child_end = None
    files: dict[str, int] = {}
    try:
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for path, data in contents.items():
            files[path] = memfd("file", data)
        host_end.setblocking(False)
        data_binds = [arg for path, fd in files.items() for arg in ("--perms", "0444", "--file", str(fd), path)]
        gate_args, gate_fds = (pipes.bwrap_args(), pipes.bwrap_fds()) if pipes else ([], ())
        argv = [python, "-I", "-S", LAUNCHER_PATH, str(child_end.fileno()), SECCOMP_PATH, SETTINGS_PATH]
        popen, status_r, err_r = gate.spawn(
            lambda: start_bwrap(
                launch, gate_args + data_binds + args, ["--", *argv], (child_end.fileno(), *gate_fds, *files.values())
            )
        )
    except BaseException:
        if host_end is not None:
            host_end.close()
        if pipes:
            pipes.close_all()
        raise
    finally:
        if child_end is not None:
            child_end.close()
        for fd in files.values():
            os.close(fd)
    admission = None
    if pipes:
        pipes.spawned()
        admission = Admission(gate, pipes, popen.pid)
    return Started(popen, StatusPipe(status_r), err_r, host_end, admission)


def start_bwrap(
    launch: bwrap.Launch, args: list[str], command: list[str], pass_fds: tuple[int, ...]
) -> tuple[subprocess.Popen[bytes], int, int]:
    """`bwrap --args FD <command>` started with a plain `subprocess.Popen` (Python can vfork()
    it); its stdin and stdout are /dev/null. The process, and the read ends of its status and
    stderr pipes."""
    ours: list[int] = []  # the read ends returned, closed if the start fails
    theirs: list[int] = []  # bwrap's ends, closed here once it has them or has failed to start
    spawned: list[subprocess.Popen[bytes]] = []  # bwrap, once spawned (see the cleanup below)
    try:
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        ours.append(status_r)
        theirs.append(status_w)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        ours.append(err_r)
        theirs.append(err_w)
        full = ["--json-status-fd", str(status_w), *args]
        args_fd = memfd("args", b"\0".join(a.encode() for a in full) + b"\0")
        theirs.append(args_fd)
        argv = ["bwrap", "--args", str(args_fd), *command]  # argv[0], in /proc/1/cmdline: no host path
        fds = (status_w, args_fd, *pass_fds)

        def popen() -> subprocess.Popen[bytes]:
            spawned.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err_w,
                    env={},  # bwrap's own pid 1 keeps it, readable from inside (catalogue §3.1)
                    pass_fds=fds,
                    executable=launch.executable,
                    process_group=0,  # bwrap leads a group its pid 1 is in until set up: see kill_sandbox
                )
            )
            return spawned[-1]

        started = launch.spawn(popen)
    except BaseException:
        for fd in ours:
            os.close(fd)
        for process in spawned:  # spawned, and then its spawner failed (`unprivileged`): not kept
            kill_sandbox(process, None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(KILL_WAIT_S)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    return started, status_r, err_r


def kill_sandbox(popen: subprocess.Popen[bytes], child: int | None) -> None:
    """SIGKILL a sandbox at whatever stage its start has reached: its pid 1 if known (`child`: the
    kernel then kills the whole pid namespace, and bwrap reaps it and exits), else bwrap's
    process group.

    bwrap clones its pid 1 and then, after writing the uid maps and reporting "child-pid" on
    --json-status-fd, wakes it through an eventfd. A pid 1 whose bwrap dies before that (killed
    by us because it had not reported yet, or failing by itself) blocks on the eventfd forever:
    it has not yet set PR_SET_PDEATHSIG, so it is left with parent pid 1, holding the memory
    cgroup busy. Until it reads the eventfd it is in bwrap's process group (`start_bwrap` makes
    bwrap a group leader), so killing the group takes it; once it has read it, bwrap has
    reported it (`kill_late_init`). The group is only signalled while bwrap is unreaped: its
    pid, the group's id, cannot have been reused.
    """
    if child is not None:
        _kill_pid(child)
    elif popen.returncode is None:
        with contextlib.suppress(OSError):
            os.killpg(popen.pid, signal.SIGKILL)


def kill_late_init(status: StatusPipe) -> None:
    """After bwrap has exited: kill the pid 1 it reported if it was not known when the sandbox
    was killed (reported between reading `status` and killing the group, it may have left the
    group) and is still a namespace's pid 1."""
    known = status.child
    child = status.child_pid()
    if known is None and child is not None and procfs.is_namespace_init(procfs.status(child)):
        _kill_pid(child)


def _kill_pid(pid: int) -> None:
    with contextlib.suppress(OSError):
        pidfd = os.pidfd_open(pid)
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            os.close(pidfd)


def memfd(name: str, data: bytes) -> int:
    """An anonymous in-memory file holding `data`, positioned at its start (close-on-exec)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def with_library_path(env: dict[str, str]) -> dict[str, str]:
    """`env` plus LD_LIBRARY_PATH when the runtime needs it to find libpython."""
    library_path = bwrap.runtime_library_path()
    return {**env, "LD_LIBRARY_PATH": library_path} if library_path else dict(env)


@functools.cache
def _compiled_launcher() -> bytes:
    """launcher_inner as a .pyc the sandbox runs directly: compiling it there took 2 ms of every
    session start. The sandbox runs this same interpreter, so the bytecode fits. The code comes
    from Python's own bytecode cache (`__pycache__`, written by pip at install or here on first
    use; compiling it in every process took 5 ms), renamed so that no code object carries the
    host path of the source into the sandbox."""
    loader = importlib.machinery.SourceFileLoader("launcher_inner", str(LAUNCHER_SOURCE))
    compiled = loader.get_code("launcher_inner")
    assert compiled is not None, "a source file compiles to code or raises"
    code = _renamed(compiled, LAUNCHER_SOURCE.name)
    return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code)  # flags, mtime, size: 0


def _renamed(code: CodeType, filename: str) -> CodeType:
    """`code` and every code object within it, with `filename` as co_filename."""
    consts = tuple(_renamed(const, filename) if isinstance(const, CodeType) else const for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)
