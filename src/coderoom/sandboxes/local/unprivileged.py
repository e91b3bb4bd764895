"""As root: bwrap spawned as uid/gid 65534 with no groups inside the session's views namespace
(`bwrap.views_namespace`), by the spawner thread alone (`spawner`).

The thread enters the namespace and takes those ids for itself only, spawns bwrap (vfork and
exec: bwrap inherits both, and exec makes the saved ids 65534 too), then takes back its own ids
and the host's namespace. It was `nsenter` before, an exec more on every session's start (about
1.5 ms here, issue 25); a pre-exec hook would make Python fork() rather than vfork().

Per thread, because of how it is done: setns on a thread that has its own filesystem state
(unshare CLONE_FS), and the raw setgroups/setresgid/setresuid system calls, which change the
calling thread's credentials only (glibc's wrappers change every thread of the process). The
saved uid and gid stay the thread's own, so it can take its ids back; its ambient capabilities
are emptied first, so bwrap gains none by the exec. The gate still checks the ids bwrap and its
pid 1 run as before anything runs in the sandbox (`gate`). If anything taken cannot be given
back, the thread is retired for good (`spawner.Poisoned`) and nothing else runs in it.

Changing the effective ids makes the kernel set the process non-dumpable (the dumpable flag is
the whole process's): it is put back as it was once the ids are. While the ids are switched the
thread runs `subprocess.Popen` and nothing else: automatic garbage collection is paused meanwhile
(a collection runs the finalizers of any object, in whichever thread triggers it) and the Popen
reaps none of the host's abandoned programs (`_host_code_held`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .spawner import Poisoned, spawner

T = TypeVar("T")
_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_FS, _CLONE_NEWNS = 0x200, 0x20000
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 3, 4, 47, 4
# (setgroups, setresgid, setresuid) by machine: the raw calls, not glibc's (see the docstring)
_SYSCALLS = {"x86_64": (116, 119, 117), "aarch64": (159, 149, 147), "riscv64": (159, 149, 147),
             "ppc64le": (81, 169, 164), "s390x": (206, 210, 208)}


def spawn(namespace_fd: int, uid: int, start: Callable[[], T]) -> T:
    """`start()` in the spawner thread, inside the namespace `namespace_fd`, as uid = gid `uid`
    with no groups; what it returns or raises. The thread is back as it was after it."""
    return spawner.run(lambda: _switched(namespace_fd, uid, start))


def in_new_namespace(make: Callable[[], T]) -> T:
    """`make()` in the spawner thread inside a new mount namespace (a copy of the host's), then
    back in the host's; what it returns (an fd to the namespace keeps it) or raises."""
    return spawner.run(lambda: _away(lambda: _libc.unshare(_CLONE_NEWNS), "cannot make a mount namespace", make))


def _away(enter: Callable[[], int], what: str, job: Callable[[], T]) -> T:
    """`job()` with the spawner thread in another mount namespace (`enter`), then back in the host's."""
    _call(_libc.unshare(_CLONE_FS), "cannot give the spawner thread its own filesystem state")
    host = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _call(enter(), what)
        try:
            return job()
        finally:
            _give_back(lambda: _libc.setns(host, _CLONE_NEWNS))
    finally:
        os.close(host)


def _switched(namespace_fd: int, uid: int, start: Callable[[], T]) -> T:
    enter = lambda: _libc.setns(namespace_fd, _CLONE_NEWNS)  # noqa: E731
    return _away(enter, "cannot enter the sandbox's mount namespace", lambda: _as(uid, start))


def _as(uid: int, start: Callable[[], T]) -> T:
    """`start()` with the spawner thread as uid = gid `uid`, no groups, no ambient capabilities."""
    machine = os.uname().machine
    if machine not in _SYSCALLS:
        raise OSError(errno.ENOSYS, f"as root on {machine}, coderoom cannot start the sandbox as uid {uid}: run it as a normal user")
    setgroups, setresgid, setresuid = _SYSCALLS[machine]
    _call(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "cannot clear ambient capabilities")
    uids, gids, groups = os.getresuid(), os.getresgid(), os.getgroups()  # this thread's
    dumpable = _libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
    with _host_code_held():  # no host code but the spawn runs here with these ids
        try:
            _call(_libc.syscall(setgroups, 0, None), "cannot drop the supplementary groups")
            _call(_libc.syscall(setresgid, uid, uid, -1), f"cannot take gid {uid}")
            _call(_libc.syscall(setresuid, uid, uid, -1), f"cannot take uid {uid}")
            return start()
        finally:
            _give_back(
                lambda: _libc.syscall(setresuid, *uids),
                lambda: _libc.syscall(setresgid, *gids),
                lambda: _libc.syscall(setgroups, len(groups), (ctypes.c_uint * len(groups))(*groups)),
                lambda: _libc.prctl(_PR_SET_DUMPABLE, dumpable, 0, 0, 0) if dumpable in (0, 1) else 0,
            )


class _Unreaped(list[object]):
    """subprocess's list of programs to reap while the spawner thread is switched: it takes in
    the programs other threads drop meanwhile, and its copy, which every Popen reaps from
    first (`subprocess._cleanup`), is empty."""

    def __getitem__(self, index: Any) -> Any:
        return [] if isinstance(index, slice) else super().__getitem__(index)


_held: tuple[bool, tuple[int, int, int], list[object]] | None = None  # what `_host_code_held` changed


@contextlib.contextmanager
def _host_code_held() -> Iterator[None]:
    """No host code runs in this thread meanwhile but the spawn's own:
    - automatic collection is paused (it runs any object's finalizer): off, and the first
      generation's threshold 0, which holds when another thread turns collection back on
      (CPython's subprocess does after forking a program with a pre-exec hook: S-T1);
    - the Popen reaps none of the host's programs dropped unreaped, which it would then drop
      with all that only they held (finalizers run by reference counting: S-T6): subprocess's
      list of them is an `_Unreaped`, and what it took in is moved back after.
    A process forked meanwhile by another thread gets both back (`_release` at fork: S-T2)."""
    global _held
    _held = gc.isenabled(), gc.get_threshold(), getattr(subprocess, "_active")
    gc.disable()
    gc.set_threshold(0)
    setattr(subprocess, "_active", _Unreaped())
    try:
        yield
    finally:
        _release()


def _release() -> None:
    global _held
    if _held is not None:
        collecting, thresholds, active = _held
        _held = None
        added = list.copy(getattr(subprocess, "_active"))
        setattr(subprocess, "_active", active)
        active.extend(added)
        gc.set_threshold(*thresholds)
        if collecting:
            gc.enable()


os.register_at_fork(after_in_child=_release)  # what is held is the spawner thread's, which a child has not


def _call(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def _give_back(*steps: Callable[[], int]) -> None:
    """Undo steps, in order; one that fails retires the spawner thread (see the docstring)."""
    for step in steps:
        if step() != 0:
            err = ctypes.get_errno()
            spawner.retire()
            raise Poisoned(f"the spawner thread could not take back its own state: {os.strerror(err)}")
