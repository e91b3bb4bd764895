"""Spawner thread as root attack pass (attackst, 2026-12-07): S-T1..S-T7 (S-T8..S-T12 in docs/security.md).

As root the spawner thread takes uid 65534 and a session's views namespace for itself alone
while it spawns bwrap (`local/unprivileged.py`). No other host code may ever run with them:
not a finalizer of a garbage collection the thread triggers, not a process forked meanwhile,
not the next job after a spawn that failed half way; and every host thread is as it was."""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import shutil
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.local import bwrap, unprivileged
from coderoom.sandboxes.session import open_session
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
            os.write(write, repr((identity(), gc.isenabled(), gc.get_threshold()[0] > 0, type(getattr(subprocess, "_active")))).encode())
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
    assert seen == [repr((identity(), True, True, list))]


def host_state() -> tuple[object, ...]:
    """What a spawner thread must have between spawns: the host's ids and namespace, the process
    dumpable and collecting as before."""
    dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
    return os.getresuid(), os.getresgid(), os.getgroups(), identity(), dumpable, gc.isenabled(), gc.get_threshold()


class Canary(Exception):
    pass


def test_s_t3_a_spawn_failing_half_way_leaves_the_thread_as_it_was(views: int, tmp_path: Path) -> None:
    """start() raising, bwrap's executable missing, or one uid 65534 may not run, and a views
    namespace whose bind fails: each fails with its own error, and the same spawner thread is
    then the host's again (not retired)."""
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    shutil.copy("/bin/true", hidden / "true")  # runnable by root, not reachable by uid 65534

    def raises() -> None:
        assert identity()[0] == NOBODY
        raise Canary("canary-s-t3")

    host = spawner.run(host_state)
    thread = spawner.run(threading.get_ident)
    attempts: list[tuple[Callable[[], object], type[BaseException]]] = [
        (raises, Canary),
        (lambda: subprocess.Popen(["bwrap"], executable="/no-such-dir-s-t3/bwrap"), FileNotFoundError),
        (lambda: subprocess.Popen(["bwrap"], executable=str(hidden / "true")), PermissionError),
    ]
    for start, error in attempts:
        with pytest.raises(error):
            unprivileged.spawn(views, NOBODY, start)
        assert spawner.run(host_state) == host
        assert spawner.run(threading.get_ident) == thread
    with pytest.raises(OSError, match="cannot bind"):  # a views namespace failing half way
        bwrap.views_namespace([(Path("/no-such-dir-s-t3"), tmp_path)])
    assert spawner.run(host_state) == host
    assert host_state()[3:] == host[3:]


HOST = r"""
import asyncio, os, signal, sys
from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.local import bwrap, unprivileged
from coderoom.sandboxes.session import open_session
from coderoom.sandboxes.session import open_session

def die(*_):
    os.kill(os.getpid(), signal.SIGKILL)

step = sys.argv[1]
bind_views, as_uid, spawn = bwrap._bind_views, unprivileged._as, unprivileged.spawn
if step == "views made":
    bwrap._bind_views = lambda binds: (bind_views(binds), die())
elif step == "switched":
    unprivileged._as = lambda uid, start: as_uid(uid, die)
elif step == "spawned, still switched":
    unprivileged._as = lambda uid, start: as_uid(uid, lambda: (start(), die()))
elif step == "switched back":
    unprivileged.spawn = lambda fd, uid, start: (spawn(fd, uid, start), die())

async def main():
    async with open_session(SandboxSpec(backend="local")) as session:
        await session.exec("true")
        die()

asyncio.run(main())
"""
# a subreaper runs the host: what the host leaves running is then its child, and reported
REAPER = r"""
import ctypes, os, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
host = subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]])
def left():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = dict(line.split(":\t", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid") == str(os.getpid()) and not fields["State"].startswith("Z"):
            found.append((int(pid), fields["Name"]))
    return found
deadline = time.monotonic() + 5
while left() and time.monotonic() < deadline:
    time.sleep(0.05)
found = left()
for pid, _ in found:
    os.kill(pid, 9)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
print(host.returncode, sorted(name for _, name in found))
"""


@pytest.mark.parametrize("step", ["views made", "switched", "spawned, still switched", "switched back", "running"])
def test_s_t5_the_host_killed_at_any_step_of_a_start_leaves_no_process(step: str) -> None:
    """SIGKILL of the host process (the spawner thread goes with it) at each step of a session's
    start: bwrap dies with its parent thread and takes its pid 1 with it, whatever it had
    reached; nothing is left running."""
    done = subprocess.run(
        [sys.executable, "-c", REAPER, HOST, step], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split("\n")[-2:] == ["-9 []", ""], done.stdout + done.stderr


async def test_s_t4_sessions_started_at_once_from_tasks_and_threads_keep_every_other_thread_the_hosts() -> None:
    """Six sessions start at once, four as tasks of one loop and two from threads of their own,
    while a host thread watches every thread but the spawner's: none ever has another uid or
    mount namespace, each session's bwrap runs as 65534 and each sees its own workspace only."""
    host_namespace = os.readlink("/proc/self/ns/mnt")
    spawner.run(lambda: None)
    stop, bad = threading.Event(), []

    def watch() -> None:
        while not stop.is_set():
            spawners = {t.native_id for t in threading.enumerate() if t.name == "coderoom-spawner"}
            for tid in map(int, os.listdir("/proc/self/task")):
                if tid in spawners:
                    continue
                try:
                    uid = Path(f"/proc/self/task/{tid}/status").read_text().split("\nUid:\t", 1)[1].split("\n")[0]
                    namespace = os.readlink(f"/proc/self/task/{tid}/ns/mnt")
                except (OSError, IndexError):
                    continue  # the thread has just gone
                if uid.split() != ["0"] * 4 or namespace != host_namespace:
                    bad.append((tid, uid, namespace))

    async def one(n: int) -> tuple[str, str]:
        async with open_session(SandboxSpec(backend="local")) as session:
            seen = await session.exec(f"echo canary-s-t4-{n} > mine && cat mine && ls")
            bwrap_uid = Path(f"/proc/{session._inner.sandbox._launcher.pid}/status").read_text().split("\nUid:\t")[1]
        return seen.stdout.decode(), bwrap_uid.split("\n")[0]

    results: dict[int, tuple[str, str]] = {}

    def in_thread(n: int) -> None:
        results[n] = asyncio.run(one(n))

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=in_thread, args=(n,)) for n in (4, 5)]
    try:
        for thread in threads:
            thread.start()
        results.update(enumerate(await asyncio.gather(*(one(n) for n in range(4)))))
        for thread in threads:
            await asyncio.to_thread(thread.join, 60)
    finally:
        stop.set()
        watcher.join(10)
    assert bad == []
    assert results == {n: (f"canary-s-t4-{n}\nmine\n", "\t".join([str(NOBODY)] * 4)) for n in range(6)}


def test_s_t6_the_spawn_reaps_no_abandoned_host_program_and_so_finalizes_nothing_of_the_host(views: int) -> None:
    """A host program dropped while it ran (an asyncio transport, a caller that never waited)
    waits in subprocess's list of children to reap; every Popen reaps from that list first and
    drops what it reaped, with all that only it still held. The spawner's Popen, as 65534, must
    not: such an object (here with a finalizer) is finalized as the host, after the spawn."""
    finalized: list[tuple[int, str]] = []

    class Canary:
        def __del__(self) -> None:
            finalized.append(identity())

    def abandon() -> int:
        program = subprocess.Popen(["sleep", "60"])
        program.canary = Canary()  # type: ignore[attr-defined]
        pid = program.pid
        del program  # still running: kept in subprocess's list until a later Popen reaps it
        return pid

    def end(pid: int) -> None:
        os.kill(pid, signal.SIGKILL)
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped

    during: list[int] = []  # dropped by another host thread while the spawner is switched
    go = threading.Event()
    dropper = threading.Thread(target=lambda: (go.wait(10), during.append(abandon()), end(during[0])))
    dropper.start()

    def start() -> None:
        go.set()
        dropper.join(10)
        subprocess.Popen(["true"], executable="/bin/true").wait()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # "subprocess N is still running"
        end(abandon())
        try:
            unprivileged.spawn(views, NOBODY, start)
        finally:
            go.set()
            dropper.join(10)
    assert finalized == []
    subprocess.Popen(["true"]).wait()  # the host's own next Popen reaps both
    assert finalized == [identity()] * 2


async def test_s_t7_signal_handlers_and_loop_callbacks_from_the_switched_window_run_as_the_host(views: int) -> None:
    """A signal arriving while the spawner has uid 65534 (sent to the spawner thread itself) and
    a callback it schedules on the host's loop: the handler runs in the main thread and the
    callback in the loop's, each as the host, never in the spawner thread."""
    ran: list[tuple[str, tuple[int, str]]] = []
    loop = asyncio.get_running_loop()
    called = asyncio.Event()
    previous = signal.signal(signal.SIGUSR1, lambda *_: ran.append(("handler", identity())))

    def start() -> None:
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
        loop.call_soon_threadsafe(lambda: (ran.append(("callback", identity())), called.set()))
        assert identity()[0] == NOBODY
        sum(range(10000))  # bytecode enough for a pending handler to be run here, if it could be

    try:
        await asyncio.to_thread(unprivileged.spawn, views, NOBODY, start)
        await asyncio.wait_for(called.wait(), 10)
        for _ in range(100):  # the main thread runs the handler at its next bytecode
            if len(ran) == 2:
                break
            await asyncio.sleep(0.01)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert sorted(ran) == [("callback", identity()), ("handler", identity())]
