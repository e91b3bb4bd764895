"""Sandbox-wide memory accounting for the local backend: one memory cgroup per session.

RLIMIT_AS bounds one process's address space, so alone it misses what a job can pin outside
it: several processes each get the full limit; memfd and SysV shm pages, and tmpfs contents in
/tmp and /dev/shm, outlive every mapping. A memory cgroup charges all of them (anonymous
memory of every process, shmem/tmpfs pages, page cache, kernel memory) to one counter and the
kernel OOM-kills inside the cgroup at the limit, so a session's total stays at `Limits.memory`.

Where it comes from, first that works (`Mode`):

* cgroup v1 as root: a child of this process's own memory cgroup (so the limits above ours
  still apply), memory.limit_in_bytes and, where swap accounting exists,
  memory.memsw.limit_in_bytes = the limit (swap does not extend it). Tested here.
* cgroup v2 with the memory controller delegated to us (a systemd user scope: our cgroup's
  parent is writable and lists `memory` in cgroup.subtree_control): a sibling of our cgroup
  with memory.max and memory.swap.max = 0. Written to the same contract; untested on this
  machine (cgroups are v1 here).
* otherwise none: the session keeps RLIMIT_AS per process, with tmpfs caps and memfd/SysV shm
  refused by seccomp (`seccomp.NO_CGROUP_DENIED`), and `coderoom sandbox info` says that several
  processes can each take the limit.

How a sandbox gets into it: on cgroup v1, bwrap is born in it (`spawn_inside`): the thread
this process keeps for spawning (`spawner`) moves itself alone into the cgroup and starts bwrap,
which inherits the thread's cgroup, then moves back. Moving a process by pid takes the kernel's global
cgroup_threadgroup_rwsem and waits for an RCU grace period (7-18 ms here, measured); a thread
writing "0" to `tasks` moves only itself and skips that lock (kernel/cgroup/cgroup.c,
`cgroup_procs_write_start`), 0.1 ms. v1 charges memory to the cgroup of a process's leader, so
the thread's visit charges nothing of ours there. On v2 (threads cannot leave their process's
cgroup) the sandbox's pid 1 is moved in while it waits at the gate, before it forks the
launcher. Either way the gate checks that pid 1 is in the cgroup before anything of the sandbox
runs (`admit`, see `gate`), so the launcher and every command start in it; on v1 bwrap's outer
process and its pid 1 are in it from their first instruction. Nothing inside can leave it
(cgroupfs is not mounted in the sandbox, and its cgroup namespace is rooted at its own cgroup).
The cgroup is removed when the session's launcher has exited, after killing anything still in it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TypeVar

from .. import records
from .spawner import spawner


_V1_ROOT = Path("/sys/fs/cgroup/memory")
_V2_ROOT = Path("/sys/fs/cgroup")
_PREFIX = "coderoom-"
# tasks leave a cgroup a little after they are reaped: well under a second when idle, more than
# one on a loaded host (the SDK's conformance run saw EBUSY after 1 s), so a deadline
_RMDIR_WAIT_S = 10.0
_EVENTS_MAX = 4096  # memory.events and memory.oom_control are a few lines
T = TypeVar("T")


class Mode(Enum):
    V1 = "cgroup v1 memory controller"
    V2 = "cgroup v2 memory controller (delegated)"
    NONE = "no memory cgroup"


def _own_path(controller: str) -> str | None:
    """This process's cgroup path for `controller` ("" = the v2 unified line), or None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def _v1_parent() -> Path | None:
    own = _own_path("memory")
    if own is None or os.geteuid() != 0:
        return None
    parent = _V1_ROOT / own.lstrip("/")
    return parent if (parent / "memory.limit_in_bytes").exists() and os.access(parent, os.W_OK) else None


def _v2_parent() -> Path | None:
    own = _own_path("")
    if own is None or not (_V2_ROOT / "cgroup.controllers").exists():
        return None
    parent = (_V2_ROOT / own.lstrip("/")).parent
    try:
        delegated = "memory" in (parent / "cgroup.subtree_control").read_text().split()
    except OSError:
        return None
    return parent if delegated and os.access(parent, os.W_OK) else None


@functools.cache
def detect() -> tuple[Mode, Path | None]:
    """Which memory accounting this machine gives us, and the parent for session cgroups."""
    for mode, find in ((Mode.V1, _v1_parent), (Mode.V2, _v2_parent)):
        parent = find()
        if parent is not None:
            return mode, parent
    return Mode.NONE, None


def mode() -> Mode:
    """The memory accounting sessions get here (see the module docstring)."""
    return detect()[0]


class MemoryCgroup:
    """One session's memory cgroup: made with its limit, the sandbox's pid 1 put in it by `admit`,
    removed by `remove` after the launcher has exited."""

    def __init__(self, mode: Mode, path: Path, limit: int) -> None:
        self.mode = mode
        self.path = path
        self.limit = limit
        self._procs_fd = -1  # cgroup.procs (v2: where pid 1 is moved) or, on v1, tasks (a thread joins)

    @classmethod
    def for_session(cls, limit: int, record: Path | None = None) -> MemoryCgroup | None:
        """A new cgroup holding `limit` bytes, or None where there is no memory cgroup here.
        With `record` (a file in the session folder, outside the workspace), the cgroup is named
        after the folder (`name_for`) and its path written there first, so `remove_recorded` can
        take it if this process is killed."""
        found, parent = detect()
        if parent is None:
            return None
        # not uuid4: uuid imports platform (1 ms)
        name = f"{_PREFIX}{os.urandom(6).hex()}"
        if record is not None:
            name = name_for(record.parent)
            if (parent / name).exists():  # a resumed session on its folder, beside the first one
                name = f"{name}-{os.urandom(6).hex()}"
        group = cls(found, parent / name, limit)
        if record is not None:
            records.write(record.parent, record.name, os.fsencode(group.path), replace=True)
        group.path.mkdir(mode=0o755)
        try:
            if found is Mode.V1:
                group._write("memory.limit_in_bytes", limit)
                if (group.path / "memory.memsw.limit_in_bytes").exists():  # memsw >= memory: second
                    group._write("memory.memsw.limit_in_bytes", limit)
            else:
                group._write("memory.max", limit)
                if (group.path / "memory.swap.max").exists():
                    group._write("memory.swap.max", 0)
            entry = "tasks" if found is Mode.V1 else "cgroup.procs"
            group._procs_fd = os.open(group.path / entry, os.O_WRONLY | os.O_CLOEXEC)
        except BaseException:
            group.remove()
            raise
        return group

    def _write(self, name: str, value: int) -> None:
        (self.path / name).write_text(str(value))

    @property
    def born_inside(self) -> bool:
        """Whether `spawn_inside` starts processes in this cgroup (v1) rather than beside it."""
        return self.mode is Mode.V1

    def spawn_inside(self, start: Callable[[], T]) -> T:
        """`start()`, run where the processes it spawns are born in this cgroup (v1: in the
        spawner thread, moved in for the call and back out after; see the module docstring),
        else as is."""
        if not self.born_inside:
            return start()

        def inside() -> T:
            # the way back is opened first: a `start` that failed for want of fds (L-S6) left the
            # thread in this cgroup, which then could not be removed
            back = os.open(self.path.parent / "tasks", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(self._procs_fd, b"0")  # this thread only: no global lock, no RCU wait
                try:
                    return start()
                finally:
                    # back where the process is; should that fail, the next spawn moves the thread
                    # again, and `_kill_leftovers` never signals this process
                    with contextlib.suppress(OSError):
                        os.write(back, b"0")
            finally:
                os.close(back)

        return spawner.run(inside)

    def holds(self, pid: int) -> bool:
        """Whether process `pid` is in this cgroup (as /proc/PID/cgroup shows it to us)."""
        controller, root = ("memory", _V1_ROOT) if self.mode is Mode.V1 else ("", _V2_ROOT)
        want = "/" + str(self.path.relative_to(root))
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                if (controller in controllers.split(",")) if controller else controllers == "":
                    return path == want
        return False

    def admit(self, pid: int) -> None:
        """Make sure process `pid` is in this cgroup (its children from then on start in it): the
        sandbox's pid 1 at the gate (see `gate`). One born in it (`spawn_inside`) is only
        checked; any other is moved in (by pid: the slow move)."""
        if self.holds(pid):
            return
        if self.mode is Mode.V1:  # the fd is `tasks`, which would move one thread
            (self.path / "cgroup.procs").write_text(str(pid))
        else:
            os.write(self._procs_fd, str(pid).encode())

    def oom_kills(self) -> int:
        """How many processes the kernel has OOM-killed in this cgroup so far. Read before and
        after every command, so with os calls (a text file object cost 50 us a read)."""
        name = "memory.oom_control" if self.mode is Mode.V1 else "memory.events"
        try:
            fd = os.open(f"{self.path}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return 0
        try:
            data = os.read(fd, _EVENTS_MAX)
        except OSError:
            return 0
        finally:
            os.close(fd)
        for line in data.splitlines():
            key, _, value = line.partition(b" ")
            if key == b"oom_kill":
                return int(value)
        return 0

    def oom_note(self, kills_before: int) -> str | None:
        """What to tell the user if the kernel OOM-killed something since `kills_before`."""
        if self.oom_kills() == kills_before:
            return None
        return (
            f"a process was killed at the sandbox's memory limit (memory = {self.limit} bytes, "
            f"{self.limit / 2**20:g} MiB, counting every process, /tmp, /dev/shm and shared memory)"
        )

    def peak(self) -> int | None:
        """The most memory the session has used at once, in bytes (None if the kernel has no peak)."""
        name = "memory.max_usage_in_bytes" if self.mode is Mode.V1 else "memory.peak"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        """Remove the cgroup once the launcher's bwrap has exited: its tasks are gone then, and
        leave the cgroup shortly after they are reaped; any still in it are leftovers, killed."""
        if self._procs_fd >= 0:
            os.close(self._procs_fd)
            self._procs_fd = -1
        deadline = time.monotonic() + _RMDIR_WAIT_S
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                self._kill_leftovers()
                time.sleep(0.02)
        self.path.rmdir()  # still busy after _RMDIR_WAIT_S: raise, naming the path

    def _kill_leftovers(self) -> None:
        """SIGKILL what is still in the cgroup after the session's bwrap exited. A bwrap killed
        while it set the sandbox up leaves its inner half (pid 1 of the new PID namespace, not
        yet under --die-with-parent) waiting for it forever, holding the cgroup (seen in the
        SDK's conformance run: EBUSY at every retry). Each pid is held by a pidfd and signalled
        only if it is still in the cgroup after that, so a reused pid is never hit."""
        for pid in self._members() - {os.getpid()}:  # never this process (see `spawn_inside`)
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:  # gone already
                continue
            try:
                if pid in self._members():
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(pidfd)

    def _members(self) -> set[int]:
        try:
            return {int(word) for word in (self.path / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            return set()


def name_for(folder: Path) -> str:
    """The memory cgroup of the session in `folder`, by name: the folder's own (unique) name, so
    the record in one folder can only ever name that folder's cgroup, never another session's. A
    second sandbox started on the same folder (a resumed session) adds `-` and 12 hex digits."""
    return f"{_PREFIX}{folder.name}"


def _named_for(name: str, folder: Path) -> bool:
    own = name_for(folder)
    suffix = name.removeprefix(own)
    return name == own or (len(suffix) == 13 and suffix[0] == "-" and all(c in "0123456789abcdef" for c in suffix[1:]))


def recorded(record: Path) -> Path | None:
    """The cgroup named in `record` (see `for_session`), if it is the cgroup of `record`'s own
    folder. The file is data: only a trusted record (see `records`) naming a directory under a
    memory cgroup root with the folder's cgroup name (`name_for`) is taken."""
    text = records.read(record.parent, record.name, 4096)
    if text is None or b"\0" in text:
        return None
    path = Path(os.fsdecode(text))
    roots = (_V1_ROOT, _V2_ROOT)
    if ".." in path.parts or not _named_for(path.name, record.parent) or not any(path.is_relative_to(r) for r in roots):
        return None
    return path


def members(group: Path) -> list[int]:
    """The pids in `group` (none if it is gone)."""
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def remove_recorded(record: Path) -> None:
    """Remove the cgroup named in `record` if it is still there: a session whose owner was
    SIGKILLed leaves it (empty once `leases.kill_users` is done). Only by rmdir, which the kernel
    refuses for a cgroup that still has tasks or children."""
    path = recorded(record)
    if path is not None:
        with contextlib.suppress(OSError):
            path.rmdir()
