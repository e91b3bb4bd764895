"""Host helpers in a docker sandbox that sandbox code cannot signal, trace or hold up.

Commands of init.py run as the sandbox's uid, so any sandbox process (a run_python kernel's
thread, a leftover of an earlier command) may SIGSTOP, SIGKILL or starve them: a helper run that
way froze the output check until the run's outer timeout (issue 19). A helper here is instead a
`docker exec` under HELPER_USER, a uid no sandbox process has: kill(2) needs the target's uid
(or CAP_KILL, dropped), and ptrace is refused by uid and by the seccomp filter every sandbox
command carries. It has a deadline twice over: a small Python wrapper arms `alarm(2)` and then
execs the helper, so the kernel ends it with SIGALRM at the deadline (an alarm survives execve,
and nobody in the sandbox can cancel it), and the host stops waiting at the same deadline plus
REPLY_SLACK_S and raises HelperTimeout, which callers turn into their bounded host-side path or
a named error. What it reads, it reads with the permissions of "others": a
file the sandbox locked (mode 0600) is refused, and a read falls back to sandbox-uid commands,
which sandbox code can freeze: those share one deadline per read (`SANDBOX_UID_READ_S`), and a
frozen one ends as a timeout, never as "not found". Archiving needs none of this: init.py kills
every sandbox process first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ...errors import SandboxFailed
from ..core import CommandResult

HELPER_USER = "65534:65534"  # nobody: not the sandbox's uid
REPLY_SLACK_S = 5.0
NO_HOME = "/nonexistent"
SANDBOX_UID_READ_S = 10.0  # one read's sandbox-uid commands together: seconds from the read's start


class SandboxReadTimeout(TimeoutError):
    """A read's sandbox-uid commands did not end by the read's deadline (sandbox code may have
    stopped them): a timeout, not a missing file."""


def sandbox_read_deadline() -> float:
    """The loop time by which a read starting now must have ended its sandbox-uid commands."""
    return asyncio.get_running_loop().time() + SANDBOX_UID_READ_S


def seconds_left(deadline: float, what: str) -> float:
    """Seconds until `deadline` (loop time); SandboxReadTimeout naming `what` once it has passed."""
    left = deadline - asyncio.get_running_loop().time()
    if left <= 0:
        raise SandboxReadTimeout(read_timeout_message(what))
    return left


def read_timeout_message(what: str) -> str:
    return (
        f"{what}: the sandbox-uid commands of this read did not finish within {SANDBOX_UID_READ_S:g} s "
        "(SANDBOX_UID_READ_S; sandbox code can stop them)"
    )


class HelperTimeout(SandboxFailed):
    """A host helper did not finish by its deadline."""


# What the dynamic loader and libc read as paths from the environment before any code of ours runs
# (from glibc's list of variables it ignores for setuid programs; the ones that act by being set
# at all, LD_SHOW_AUXV and LD_DYNAMIC_WEAK, load nothing and are left alone, as a `docker exec`
# cannot unset a variable). An exec inherits the container's environment (the manifest's: it may
# name a folder the sandbox writes, LD_LIBRARY_PATH=/workspace/lib say), so each is blanked for
# the host's execs: no sandbox-written library loads before the helper or the rescue archiver
# has even started.
LOADER_VARIABLES = (
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LD_AUDIT", "LD_DEBUG", "LD_DEBUG_OUTPUT",
    "LD_LIBRARY_PATH", "LD_ORIGIN_PATH", "LD_PRELOAD", "LD_PROFILE", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR",
)


def exec_environment(more: dict[str, str]) -> dict[str, str]:
    """The environment of a host's `docker exec`: LOADER_VARIABLES blanked, then `more`."""
    return {**dict.fromkeys(LOADER_VARIABLES, ""), **more}


# argv[1]: seconds; argv[2:]: the helper, exec'd with the alarm pending (SIGALRM ends it)
_ALARM_THEN_EXEC = "import os, signal, sys; signal.alarm(int(sys.argv[1])); os.execvp(sys.argv[2], sys.argv[2:])"


def with_alarm(python: Sequence[str], argv: Sequence[str], timeout: float) -> list[str]:
    """`argv` run by a wrapper that makes the kernel end it `timeout` seconds (rounded up) in."""
    return [*python, "-I", "-S", "-c", _ALARM_THEN_EXEC, str(max(1, int(timeout + 0.999))), *argv]


def _run(api: Any, container_id: str, argv: Sequence[str], cwd: str, cap: int) -> CommandResult:
    """The exec, its two outputs (each capped at `cap` bytes: the rest is drained, not kept)."""
    created = api.exec_create(
        container_id, list(argv), user=HELPER_USER, workdir=cwd, environment=exec_environment({"HOME": NO_HOME}),
        stdout=True, stderr=True, stdin=False, tty=False,
    )  # fmt: skip
    out, err = bytearray(), bytearray()
    for stdout, stderr in api.exec_start(created["Id"], stream=True, demux=True):
        if stdout and len(out) < cap:
            out += stdout[: cap - len(out)]
        if stderr and len(err) < cap:
            err += stderr[: cap - len(err)]
    code = api.exec_inspect(created["Id"]).get("ExitCode")
    return CommandResult(exit_code=int(code) if code is not None else 1, stdout=bytes(out), stderr=bytes(err))


async def run_helper(
    api: Any, container_id: str, argv: Sequence[str], *, cwd: str, timeout: float, cap: int, what: str
) -> CommandResult:
    """Run `argv` as HELPER_USER in the container (module docstring); HelperTimeout naming
    `what` when it has not finished `timeout` + REPLY_SLACK_S seconds after it was sent."""
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(_run, api, container_id, argv, cwd, cap), timeout + REPLY_SLACK_S
        )
    except TimeoutError:
        raise HelperTimeout(f"{what} did not finish within its {timeout:g} s deadline") from None
