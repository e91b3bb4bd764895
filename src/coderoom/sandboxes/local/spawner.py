"""The process's spawner: one thread, kept for the life of the process, that starts every bwrap
which must be started from a thread of its own.

Two things need it. On cgroup v1 the thread moves itself alone into the session's memory cgroup
so that bwrap is born there (`cgroup.MemoryCgroup.spawn_inside`). As root it enters the
session's views namespace and takes uid/gid 65534 for the spawn, per thread (`unprivileged`).
Not a thread per spawn: bwrap's --die-with-parent takes the spawning *thread* as its parent
(PR_SET_PDEATHSIG fires when that thread exits). Nothing but these spawns, and the making of
the views namespaces (`bwrap.views_namespace`), ever runs in it, so the namespaces and the
credentials it takes for a moment are never another thread's.

A job that could not give back what it took retires the thread (`retire`, then `Poisoned`):
it runs no job again, failing any still queued to it, and never exits (the sandboxes it
started keep their parent); the next spawn gets a new thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from _queue import SimpleQueue
from typing import TypeVar

T = TypeVar("T")
_Request = tuple[Callable[[], None], list[BaseException], threading.Event]


class Poisoned(OSError):
    """A job could not undo a change to the spawner thread's own state (its mount namespace, its
    credentials): the thread must never run host code again. An OSError, so a start that meets
    it fails as any start bwrap could not make (SandboxFailed)."""


class _Spawner:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: SimpleQueue[_Request] | None = None
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forget)  # a forked child has no such thread

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._requests = None
        self._thread = None

    def run(self, job: Callable[[], T]) -> T:
        """`job()` in the spawner thread (at once when called from it); what it returns or raises.
        The caller returns only once the job is done, even when a signal raises in it meanwhile
        (re-raised then): the job spawns with the caller's descriptors, which its cleanup would
        otherwise close, or let another file reuse, under it."""
        if threading.current_thread() is self._thread:
            return job()
        with self._lock:
            if self._requests is None:
                self._requests = SimpleQueue()
                self._thread = threading.Thread(
                    target=self._serve, args=(self._requests,), name="coderoom-spawner", daemon=True
                )
                self._thread.start()
            requests = self._requests
        outcome: list[T] = []
        failed: list[BaseException] = []

        def call() -> None:
            try:
                outcome.append(job())
            except BaseException as exc:  # re-raised in the caller's thread
                failed.append(exc)

        done = threading.Event()
        requests.put((call, failed, done))
        interrupted: BaseException | None = None
        while not done.is_set():
            try:
                done.wait()
            except BaseException as exc:  # a signal's handler raised here (KeyboardInterrupt): the job
                interrupted = interrupted or exc  # still uses the caller's descriptors, so it ends first
        if interrupted is not None:
            raise interrupted
        if failed:
            raise failed[0]
        return outcome[0]

    def retire(self) -> None:
        """Called by a job whose undo failed, before it raises Poisoned: the next `run` starts a
        new thread, and this one runs no job again (`_serve`)."""
        with self._lock:
            self._requests = None
            self._thread = None

    def _serve(self, requests: SimpleQueue[_Request]) -> None:
        while True:
            call, failed, done = requests.get()
            try:
                if self._requests is requests:
                    call()
                else:  # retired: queued before the retirement, failed unrun
                    failed.append(Poisoned("the spawner thread was retired; start again"))
            finally:
                done.set()


spawner = _Spawner()
