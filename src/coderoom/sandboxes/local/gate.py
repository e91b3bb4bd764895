"""The gate a local sandbox passes before anything runs in it: bwrap's pid 1 waits on
`--block-fd` until the host has made sure it is in the session's memory cgroup and, as root,
checked that bwrap runs as the unprivileged host uid. A thread does this while the host goes on.

Why a gate: moving a process into a cgroup by pid waits for an RCU grace period
(cgroup_threadgroup_rwsem; 7-18 ms here, the same on cgroup v2). Done between fork and exec, as
it was before, it held up bwrap's start, and the host's own start-up with it (and needed fork()
where Python can vfork()). On cgroup v1 bwrap is now born in the cgroup (`MemoryCgroup.spawn_inside`,
0.1 ms), and the gate only checks that pid 1 is there; on v2 the gate moves it, overlapping
bwrap's setup and the host's imports.

bwrap's pid 1 reports itself on `--info-fd` (written once, then closed), makes the sandbox's
mounts, drops its privileges and then blocks on the gate; only then does it fork the launcher,
which every command descends from, so all of them start inside the cgroup. What runs before the
gate is bwrap's own code. bwrap's outer process is in the session's cgroup on v1 (born there)
and stays in ours on v2: it runs nothing of the sandbox and only waits for pid 1.

pid 1 goes on when it reads a byte, or EOF once every write end is closed. On any failure the
sandbox is killed instead, and the write end stays open until its bwrap has exited (`close`). If
this process dies at the gate, pid 1 reads EOF: its launcher then finds no host on its socket and
exits before running anything, because the host sends a command only after the launcher has said
it is ready, which it can only do after the gate, and only once this thread has admitted pid 1
(`passed`, checked by `Launcher.wait_ready`: a gate opened by EOF in a living host runs nothing).
On v2 the launcher also stops by itself if it finds itself outside the cgroup (`cgroup_line`).

The uid check backs the spawner thread's switch to uid 65534 (`unprivileged`): a switch that
did not hold fails the start instead of running the sandbox as host root.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable
from typing import TypeVar

from . import procfs
from .cgroup import MemoryCgroup, Mode

MAX_INFO_BYTES = 65536  # far more than bwrap's info (pid 1 and six namespace ids)
CLOSE_WAIT_S = 5.0  # for the thread to finish once bwrap has exited
T = TypeVar("T")


class GateError(RuntimeError):
    """The gate stayed shut: the sandbox was killed, and this says why."""


class Gate:
    """What the gate requires of a sandbox: the memory cgroup its pid 1 joins (None: there is none
    here) and the host uid/gid bwrap must run as (None: we are not root, bwrap runs as us)."""

    def __init__(self, memory: MemoryCgroup | None, host_id: int | None) -> None:
        self.memory = memory
        self.host_id = host_id

    def spawn(self, start: Callable[[], T]) -> T:
        """`start()`, which spawns bwrap: in the memory cgroup where it can be born there
        (`MemoryCgroup.spawn_inside`), else as is (pid 1 is then moved at the gate)."""
        return self.memory.spawn_inside(start) if self.memory is not None else start()

    @property
    def needed(self) -> bool:
        return self.memory is not None or self.host_id is not None

    @property
    def cgroup_line(self) -> str | None:
        """The /proc/self/cgroup line an admitted pid 1 is moved in: "memory" on cgroup v1, ""
        (the unified line) on v2, None without a memory cgroup or when bwrap is born in it (v1:
        the host checks at the gate instead). The launcher reads it and stops if its own path
        there is still "/" (not admitted: bwrap went on at EOF)."""
        if self.memory is None or self.memory.born_inside:  # its cgroup namespace is rooted in it: "/"
            return None
        return "memory" if self.memory.mode is Mode.V1 else ""


class GatePipes:
    """The two pipes a gated bwrap is started with: bwrap writes its info into one and its pid 1
    reads the other (`bwrap_args`, `bwrap_fds`); the host keeps the other ends."""

    def __init__(self) -> None:
        self.info_r, self.info_w = os.pipe2(os.O_CLOEXEC)
        try:
            self.block_r, self.block_w = os.pipe2(os.O_CLOEXEC)
        except BaseException:  # out of fds (L-S6): none kept of a start that failed
            os.close(self.info_r)
            os.close(self.info_w)
            raise

    def bwrap_args(self) -> list[str]:
        return ["--info-fd", str(self.info_w), "--block-fd", str(self.block_r)]

    def bwrap_fds(self) -> tuple[int, int]:
        return self.info_w, self.block_r

    def spawned(self) -> None:
        """bwrap has its ends now: close ours of them."""
        for fd in self.bwrap_fds():
            os.close(fd)

    def close_all(self) -> None:
        """bwrap was never started."""
        for fd in (self.info_r, self.info_w, self.block_r, self.block_w):
            os.close(fd)


class Admission:
    """One sandbox at the gate: a thread that admits its pid 1, or kills it and says why."""

    def __init__(self, gate: Gate, pipes: GatePipes, bwrap_pid: int) -> None:
        self._gate = gate
        self._info_r = pipes.info_r
        self._block_w = pipes.block_w
        self._bwrap_pid = bwrap_pid
        self.error: str | None = None
        self.passed = False  # set before pid 1 is let through: what `Launcher.wait_ready` requires
        self._thread = threading.Thread(target=self._admit, name="coderoom-gate", daemon=True)
        self._thread.start()

    def _admit(self) -> None:
        pidfd = -1
        try:
            pid = self._read_pid()
            if pid is None:
                raise GateError("bwrap exited before it reported the sandbox's pid 1")
            pidfd = os.pidfd_open(pid)
            self._check(pid)
            if self._gate.memory is not None:
                self._gate.memory.admit(pid)
            self.passed = True
            os.write(self._block_w, b"1")
            os.close(self._block_w)  # open: pid 1 has read or will read its byte
            self._block_w = -1
        except BaseException as exc:  # the thread's end: reported through `error`
            self.passed = False
            self.error = f"the sandbox was stopped at its start: {exc}"
            if pidfd >= 0:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        finally:
            if pidfd >= 0:
                os.close(pidfd)
            os.close(self._info_r)

    def _read_pid(self) -> int | None:
        """pid 1's host pid from bwrap's info, read to EOF (bwrap closes it once written)."""
        data = b""
        while len(data) <= MAX_INFO_BYTES:
            chunk = os.read(self._info_r, MAX_INFO_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
        try:
            pid = json.loads(data).get("child-pid")
        except (ValueError, AttributeError):
            return None
        return pid if isinstance(pid, int) and pid > 1 else None

    def _check(self, pid: int) -> None:
        """pid is bwrap's child and a namespace's pid 1; as root, both run as the host uid."""
        child = procfs.status(pid)
        if child.get("PPid") != [str(self._bwrap_pid)] or not procfs.is_namespace_init(child):
            raise GateError(f"pid {pid} is not the pid 1 of bwrap {self._bwrap_pid}")
        if self._gate.host_id is None:
            return
        ids = [str(self._gate.host_id)] * 4
        for name, fields in (("bwrap", procfs.status(self._bwrap_pid)), ("its pid 1", child)):
            if fields.get("Uid") != ids or fields.get("Gid") != ids or fields.get("Groups") != []:
                raise GateError(f"{name} does not run as uid/gid {self._gate.host_id} with no groups")

    def close(self) -> None:
        """After bwrap has exited: wait for the thread (bounded) and close the gate's write end."""
        self._thread.join(CLOSE_WAIT_S)
        if self._block_w >= 0 and not self._thread.is_alive():
            os.close(self._block_w)
            self._block_w = -1

