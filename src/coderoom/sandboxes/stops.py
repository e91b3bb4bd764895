"""Which resource limit ended a command, named with its value, so the model can adapt its code
and the user can raise the limit instead of guessing at a bare exit status.

A backend calls `named_stop` once a command has ended (and neither the wall clock nor the
workspace limit stopped it, which the backends name themselves). It reads how the command
ended: death by SIGXCPU is RLIMIT_CPU, death by SIGXFSZ or an EFBIG message is RLIMIT_FSIZE,
the backend's own OOM evidence (a cgroup's oom_kill count) is the memory limit. Without such
evidence, the messages a failed fork or allocation leaves in stderr name the pids or memory
limit as *probably* the cause: a program can print those words, or exit with 152, itself, so
the note is a hint in the command's output, never a decision coderoom takes.
"""

from __future__ import annotations

import re
import signal

from .limits import Limits, shown_size

# how much of stderr's end is searched: the messages come last, and the sandbox's text is hostile
_TAIL_BYTES = 8192
_FORK_FAILED = re.compile(
    rb"can(?:no|')t fork|fork: retry|fork failed|can't start new thread|Resource temporarily unavailable",
    re.IGNORECASE,
)
_ALLOCATION_FAILED = re.compile(rb"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory", re.IGNORECASE)
MAX_LOGGED = 20  # limits a session remembers for the run's end
_FILE_TOO_LARGE = re.compile(rb"File too large|File size limit exceeded")


def named_stop(exit_code: int, stderr: bytes, limits: Limits, *, oom_killed: bool = False) -> str | None:
    """A sentence naming the limit the command ran into (for `CommandResult.stopped_by` and a
    `[coderoom: ...]` note), or None when nothing points at one.

    `exit_code` is 128 + N for death by signal N, as every backend reports it."""
    if oom_killed:
        return f"stopped by the memory limit (memory = {shown_size(limits.memory)} for the whole sandbox)"
    if exit_code == 128 + signal.SIGXCPU:
        return f"stopped by the cpu_time limit (cpu_time = {limits.cpu_time} s of CPU per process)"
    tail = stderr[-_TAIL_BYTES:]
    file_size = f"the file_size limit (file_size = {shown_size(limits.file_size)} per file)"
    if exit_code == 128 + signal.SIGXFSZ:
        return f"stopped by {file_size}"
    if exit_code == 0:
        return None
    if _FILE_TOO_LARGE.search(tail):
        return f"probably hit {file_size}: a write failed with 'File too large'"
    if _FORK_FAILED.search(tail):
        return (
            f"probably hit the pids limit (pids = {limits.pids} processes and threads): "
            "a process or thread could not be created"
        )
    if _ALLOCATION_FAILED.search(tail):
        return f"probably hit the memory limit (memory = {shown_size(limits.memory)}): an allocation failed"
    return None


def log_stop(log: list[str], stopped_by: str | None) -> None:
    """Keep `stopped_by` for the end of the run: each sentence once, at most MAX_LOGGED."""
    if stopped_by and stopped_by not in log and len(log) < MAX_LOGGED:
        log.append(stopped_by)


# the words of a stop sentence that name a limit, and the flags that raise it (every command that
# starts a sandbox takes `--limit NAME=VALUE`; these have a short form too)
_RAISED_BY = [
    ("wall-clock limit", "--timeout SECONDS (or --limit timeout=SECONDS)"),
    ("memory limit", "--memory SIZE (or --limit memory=SIZE)"),
    ("pids limit", "--limit pids=N"),
    ("cpu_time limit", "--limit cpu_time=SECONDS"),
    ("file_size limit", "--limit file_size=SIZE"),
    ("workspace_size", "--limit workspace_size=SIZE"),
]


def how_to_raise(stopped_by: str) -> str:
    """`stopped_by` with the flag that raises its limit: a timeout at the end of a run once gave
    no hint that `--timeout` exists."""
    for words, flags in _RAISED_BY:
        if words in stopped_by:
            return f"{stopped_by}; raise it with {flags}"
    return stopped_by


def stop_note(stopped_by: str) -> bytes:
    """The line appended to a command's stderr, in the style of every coderoom note."""
    return f"\n[coderoom: {stopped_by}]\n".encode()
