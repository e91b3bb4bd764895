"""Attack pass T-A (2026-12-07) on D-F11's fix, `Forwarder.ensure` in the Docker sandbox's PID 1
(sandboxes/docker/inside/init.py): a stopped egress forwarder is killed and started afresh
before the next command.

T-A1: sandbox code that outlives a command (a live job: the run_python kernel, a PTY session)
stops every process it may signal, again and again (`kill -STOP -1` in a loop). Each command's
ensure then kills the stopped forwarder and starts a new one, which the loop stops before it
listens: PID 1 waited FORWARDER_READY_S (30 s) for its "ready" line before every command, its
whole loop (the live jobs' output, the host's other requests) stalled meanwhile. Now a
forwarder stopped before it listens is not waited for; the next ensure kills it.

Driven on the host with init.py's own Server and Forwarder (real processes, really stopped).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from .test_attackdf_forwarder import command, init, server, state, wait_for  # noqa: F401 - fixtures

STOPS_BEFORE_READY = "import os, signal, time\nos.kill(os.getpid(), signal.SIGSTOP)\nprint('ready', flush=True)\ntime.sleep(600)\n"


def test_t_a1_a_forwarder_stopped_before_it_listens_does_not_hold_pid_1(server: Any, init: Any) -> None:
    """A stop between the fork and the "ready" line, as a live job's stop loop makes one."""
    server.forwarder.argv[3] = STOPS_BEFORE_READY
    begun = time.monotonic()
    server.start(command("c0"))
    waited = time.monotonic() - begun
    first = server.forwarder.pid
    assert first is not None and state(first) == b"T"
    assert waited < init.FORWARDER_READY_S / 2, f"PID 1 waited {waited:.1f} s for a stopped forwarder"
    server.start(command("c1"))  # the next command's ensure kills the stopped one and starts another
    assert server.forwarder.pid not in (None, first)
    with pytest.raises(ChildProcessError):  # the stopped one was killed and collected, no zombie left
        os.waitpid(first, os.WNOHANG)


def test_t_a2_a_forwarder_continued_before_the_next_command_is_kept(server: Any) -> None:
    """SIGSTOP then SIGCONT (the sandbox's own `kill -CONT -1`) between commands: the forwarder
    runs again and ensure leaves it, so nothing is killed that is not stopped."""
    server.start(command("c0"))
    first = server.forwarder.pid
    os.kill(first, signal.SIGSTOP)
    wait_for(lambda: state(first) == b"T")
    os.kill(first, signal.SIGCONT)
    wait_for(lambda: state(first) in (b"S", b"R"))
    server.start(command("c1"))
    assert server.forwarder.pid == first
