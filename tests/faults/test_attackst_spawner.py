"""Spawner thread as root attack pass (attackst, 2026-12-07): S-T1..S-T5.

As root the spawner thread takes uid 65534 and a session's views namespace for itself alone
while it spawns bwrap (`local/unprivileged.py`). No other host code may ever run with them:
not a finalizer of a garbage collection the thread triggers, not a process forked meanwhile,
not the next job after a spawn that failed half way; and every host thread is as it was."""

from __future__ import annotations

import gc
import os
import subprocess
import threading
from collections.abc import Callable

import pytest
from backends import require_backend

from coderoom.sandboxes.local import bwrap, unprivileged
from coderoom.sandboxes.local.spawner import spawner

NOBODY = bwrap.UNPRIVILEGED_HOST_ID


@pytest.fixture(autouse=True)
def _as_root() -> None:
    require_backend("local")
    if os.geteuid() != 0:
        pytest.skip("as root only: the spawner thread takes uid 65534 then")


@pytest.fixture
def views() -> object:
    fd = bwrap.views_namespace([])
    yield fd
    os.close(fd)


def identity() -> tuple[int, str]:
    """This thread's effective uid and mount namespace."""
    return os.geteuid(), os.readlink("/proc/thread-self/ns/mnt")


_fork_pause: list[Callable[[], None]] = []  # set by a test: run before os.fork in thread "other"
os.register_at_fork(before=lambda: [pause() for pause in _fork_pause if threading.current_thread().name == "other"])


def test_s_t1_a_collection_in_the_switched_window_runs_no_finalizer_as_65534(views: int) -> None:
    """Another host thread starts a program with a pre-exec hook (CPython's subprocess turns
    automatic collection off around that fork and back on after it): its fork began before
    the spawner switched, and it turns collection back on while the spawner has uid 65534.
    Garbage the switched thread makes, with a finalizer, is still never finalized there."""
    in_fork, switched, forked = threading.Event(), threading.Event(), threading.Event()
    _fork_pause.append(lambda: (in_fork.set(), switched.wait(10)))

    def other() -> None:
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)
        forked.set()

    finalized: list[tuple[int, str]] = []

    class Canary:
        def __del__(self) -> None:
            finalized.append(identity())

    def start() -> None:
        switched.set()
        assert forked.wait(10)  # the other thread has turned collection back on by now
        cycle = Canary()
        cycle.me = cycle  # type: ignore[attr-defined]
        del cycle
        for _ in range(20):  # enough tracked objects for several automatic collections
            [[] for _ in range(1000)]

    thread = threading.Thread(target=other, name="other")
    try:
        assert gc.isenabled()
        thread.start()
        assert in_fork.wait(10)
        unprivileged.spawn(views, NOBODY, start)
    finally:
        _fork_pause.clear()
        switched.set()
        thread.join(10)
    gc.collect()
    assert finalized and all(uid == 0 for uid, _ in finalized), finalized
    assert gc.isenabled() and gc.get_threshold()[0] > 0


def test_s_t2_a_process_forked_while_the_spawner_is_switched_collects_garbage(views: int) -> None:
    """A host thread forks (multiprocessing, a server's worker) while the spawner has uid 65534:
    the child has the forking thread's ids and the host's namespace, and automatic collection
    is on in it (the spawner's pause is the parent's, for one spawn, not the child's forever)."""
    seen: list[str] = []
    go = threading.Event()

    def fork() -> None:  # a host thread started before the spawn, forking once the spawner is switched
        assert go.wait(10)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, repr((identity(), gc.isenabled(), gc.get_threshold()[0] > 0)).encode())
            os._exit(0)
        os.close(write)
        seen.append(os.read(read, 4096).decode())
        os.close(read)
        os.waitpid(pid, 0)

    forker = threading.Thread(target=fork)
    forker.start()
    try:
        unprivileged.spawn(views, NOBODY, lambda: (go.set(), forker.join(10)))
    finally:
        go.set()
        forker.join(10)
    assert seen == [repr((identity(), True, True))]
