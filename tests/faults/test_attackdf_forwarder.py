"""Attack pass D-F (2026-12-07), faults D-F1 and D-F11. D-F1: after sandbox code's `kill -9 -1`, the next command
could come in before the kernel had ended the killed egress forwarder. PID 1's reap found
nothing to collect, `Forwarder.ensure` saw its pid still set and did not restart it, and that
command's fetches were refused (the forwarder came back one command later). Now `ensure` reaps
until a dying forwarder (`dying`: a SIGKILL pending, an exit begun, a zombie) is gone, within
FORWARDER_EXIT_S, before it decides. D-F11: sandbox code's `kill -STOP -1` left the forwarder
stopped, and every later fetch of the session hung in its listen queue; now `ensure` kills a
stopped forwarder, which the same path then collects and starts afresh.

The race is driven deterministically on the host with init.py's own Server and Forwarder: the
forwarder is a real process, really killed; the one thing held is PID 1's first reap after the
kill, which answers "nothing exited yet" as it does while the kernel is still ending the process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from coderoom.sandboxes.docker.request import INIT_PATH

READY_SOURCE = "import time\nprint('ready', flush=True)\ntime.sleep(600)\n"


@pytest.fixture(scope="module")
def init() -> ModuleType:
    spec = importlib.util.spec_from_file_location("coderoom_docker_init", INIT_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # definitions only: its main part runs as __main__
    return module


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def state(pid: int) -> bytes:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0]


@pytest.fixture
def server(init: ModuleType) -> Iterator[Any]:
    forwarder = init.Forwarder(READY_SOURCE, "/nonexistent.sock", 1)
    forwarder.argv[0] = sys.executable
    server = init.Server(exit_on_eof=False, forwarder=forwarder)
    yield server
    for pid in [forwarder.pid, *server.jobs]:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    for job in server.jobs.values():
        init.remove_home(job.home)


def command(rid: str) -> bytes:
    return json.dumps({"id": rid, "argv": ["true"], "cwd": "/", "timeout": 5, "limit": 100}).encode()


def test_a_command_right_after_kill_9_finds_a_new_forwarder(server: Any) -> None:
    server.start(command("c0"))  # the forwarder starts before the first command
    first = server.forwarder.pid
    assert first is not None and state(first) in (b"S", b"R")
    os.kill(first, signal.SIGKILL)  # sandbox code's kill -9 -1, as the forwarder sees it
    wait_for(lambda: state(first) == b"Z")
    real_reap, held = server.reap, [True]

    def reap_not_yet() -> None:  # the first reap runs before the kernel has ended it
        if held:
            held.pop()
            return
        real_reap()

    server.reap = reap_not_yet
    server.start(command("c1"))
    assert not held, "the test's hold was never reached"
    assert server.forwarder.pid not in (None, first), "c1 went ahead with the dead forwarder's pid"
    assert state(server.forwarder.pid) in (b"S", b"R")


def test_d_f11_a_command_after_sandbox_code_stopped_the_forwarder_finds_a_new_one(server: Any) -> None:
    """A stopped forwarder held every later fetch in its listen queue until the session ended."""
    server.start(command("c0"))
    first = server.forwarder.pid
    os.kill(first, signal.SIGSTOP)  # sandbox code's kill -STOP -1, as the forwarder sees it
    wait_for(lambda: state(first) == b"T")
    server.start(command("c1"))
    assert server.forwarder.pid not in (None, first), "c1 went ahead with the stopped forwarder"
    assert state(server.forwarder.pid) in (b"S", b"R")
    with pytest.raises(ChildProcessError):  # the stopped one was killed and reaped, not left behind
        os.waitpid(first, os.WNOHANG)


def test_dying_tells_a_killed_or_gone_process_from_a_live_or_stopped_one(init: ModuleType) -> None:
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        assert not init.dying(sleeper.pid)
        os.kill(sleeper.pid, signal.SIGSTOP)
        wait_for(lambda: state(sleeper.pid) == b"T")
        assert not init.dying(sleeper.pid), "a stopped forwarder is not on its way out"
        os.kill(sleeper.pid, signal.SIGKILL)
        wait_for(lambda: state(sleeper.pid) == b"Z")
        assert init.dying(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert init.dying(sleeper.pid), "a pid no longer there"
