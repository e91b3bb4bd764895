"""How long a live (PTY) process may run, the same on every backend.

A process started by `pty_exec_start` (the SDK's `exec_command` when a command outlives its
`yield_time_ms`, or anything started with tty=true) keeps running after the call returns, so
the model can poll it and write to it with `write_stdin`. It is still a command of the job:
`Limits.timeout` is its wall clock, counted from its start, and when it reaches it its whole tree
is killed, its output gets the same `[coderoom: killed after the N s wall-clock limit]` line a
one-shot command gets, and the next poll reports exit code 124 (`EXIT_TIMEOUT`).

The one exemption is explicit: a caller passing `timeout=LIVES_WITH_SESSION` gets a process with
no wall clock, which runs until it exits, is terminated, or the session closes. Only coderoom's
own run_python kernel passes it (its cells have their own per-call limit), or is started by
`PtySessions.start_channel`, which no SDK tool can call; the model's tools never pass `timeout`
at all, so they cannot ask for it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # no pydantic on `coderoom sandbox run`'s path (local/longlived imports this)
    from .limits import Limits

LIVES_WITH_SESSION = math.inf  # pty_exec_start(timeout=...): no wall clock (the run_python kernel)


def lifetime(timeout: float | None, limits: Limits) -> float | None:
    """The wall clock of a live process: `limits.timeout`, or a caller's shorter `timeout`;
    None (no wall clock) for `LIVES_WITH_SESSION` only."""
    if timeout == LIVES_WITH_SESSION:
        return None
    return limits.timeout if timeout is None or timeout <= 0 else min(timeout, limits.timeout)


def wall_clock_stop(seconds: float) -> str:
    """The `stopped_by` sentence of a live process killed at its wall clock (as for one command)."""
    return f"the {seconds:g} s wall-clock limit"


def wall_clock_note(seconds: float) -> str:
    """What the process's output says when it was killed at its wall clock."""
    return f"killed after the {seconds:g} s wall-clock limit"
