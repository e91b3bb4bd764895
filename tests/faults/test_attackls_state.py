"""Local sandbox's faster exec path attack pass (attackls, 2026-12-07), what a command starts
with: L-S3..L-S5.

The stub's setup (seccomp program, capability arguments, capped rlimits) is made once in the
launcher and every slot is a copy of it (issue 25). A command should start with the session's
settings only: nothing another command changed, nothing the host process had when it started
the sandbox, and its exit reported once it has exited, on a terminal too."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from backends import require_backend

from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


# what a command starts with that it could change for itself (sh: python changes its signals)
LOOK = (
    "umask; grep -E '^(SigBlk|SigIgn|NoNewPrivs|Seccomp|CapEff)' /proc/self/status; cat /proc/self/limits; "
    "nice; pwd; cat /proc/self/oom_score_adj; ls -A /tmp /dev/shm; ls /proc/self/fd; cat /proc/1/cmdline | wc -c"
)
# a command changing all of that for itself, and what it may of its init's (pid 1, same uid):
# its rlimits, its niceness, its scheduling; every process of its uid (PRIO_USER) reniced
TAMPER = r"""
import ctypes, os, resource, signal
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, action):
    try:
        action()
        print("done", name)
    except OSError as exc:
        print("refused", name, exc.errno)
os.umask(0)
signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP})
for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1, signal.SIGQUIT):
    signal.signal(sig, signal.SIG_IGN)
for res in (resource.RLIMIT_NOFILE, resource.RLIMIT_CPU, resource.RLIMIT_NPROC, resource.RLIMIT_FSIZE):
    attempt(f"own {res}", lambda: resource.setrlimit(res, (16, 16)))
    attempt(f"init's {res}", lambda: resource.prlimit(1, res, (16, 16)))
attempt("own nice", lambda: os.setpriority(os.PRIO_PROCESS, 0, 19))
attempt("init's nice", lambda: os.setpriority(os.PRIO_PROCESS, 1, 19))
attempt("every process of the uid's nice", lambda: os.setpriority(os.PRIO_USER, 0, 19))
attempt("init's scheduling", lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)))
attempt("own oom_score_adj", lambda: open("/proc/self/oom_score_adj", "w").write("500"))
for path in ("/tmp/cr-left", "/dev/shm/cr-left"):
    open(path, "w").close()
os.chdir("/tmp")
os.set_inheritable(os.open("/workspace", os.O_RDONLY), True)
status = dict(line.split(":\t") for line in open("/proc/self/status").read().splitlines())
print("\nchanged", oct(os.umask(0)), status["SigBlk"], resource.getrlimit(resource.RLIMIT_NOFILE))
"""


async def test_l_s3_nothing_a_command_changes_of_itself_or_its_init_reaches_the_next() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        first = await session.exec(LOOK)
        tampered = await session.exec("python3", "-c", TAMPER, shell=False)
        after = [await session.exec(LOOK) for _ in range(2)]
    assert first.exit_code == 0 and "Seccomp:\t2" in first.stdout.decode(), first.stderr
    assert tampered.exit_code == 0, tampered.stderr
    attempts, changed = tampered.stdout.decode().split("\n\n")
    assert changed.split() == ["changed", "0o0", "fffffffe7ffbfeff", "(16,", "16)"], changed  # its own, changed
    assert "done own 7" in attempts and "done own nice" in attempts, attempts  # 7: RLIMIT_NOFILE
    for look in after:
        assert look.stdout == first.stdout, (first.stdout, look.stdout)


READ_SIGNALS = "grep -E '^Sig(Blk|Ign)' /proc/self/status"


def run_with_host_signals(*command: str) -> subprocess.CompletedProcess[str]:
    """`coderoom sandbox run -- command`, started with SIGUSR2 and SIGWINCH ignored and SIGUSR1
    blocked, as a host process that ignores or holds them starts it (execve keeps both)."""

    def host_state() -> None:
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        signal.signal(signal.SIGWINCH, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})

    return subprocess.run(
        [sys.executable, "-m", "coderoom", "sandbox", "run", "--", *command],
        preexec_fn=host_state,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_l_s4_a_command_starts_with_no_signal_the_host_ignored_or_blocked() -> None:
    done = run_with_host_signals("sh", "-c", READ_SIGNALS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["SigBlk:", "0" * 16, "SigIgn:", "0" * 16], done.stdout


async def test_l_s4_a_session_opened_by_a_host_ignoring_signals_gives_its_commands_none() -> None:
    ignored = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGHUP, signal.SIGUSR2)}
    try:  # as under nohup: bwrap and so the launcher start with them ignored
        async with open_session(SandboxSpec(backend="local")) as session:
            plain = await session.exec(READ_SIGNALS)
            terminal = await session.pty_exec_start(READ_SIGNALS, tty=True, yield_time_s=5)
    finally:
        for sig, handler in ignored.items():
            signal.signal(sig, handler)
    assert plain.stdout.split() == [b"SigBlk:", b"0" * 16, b"SigIgn:", b"0" * 16], plain.stdout
    assert terminal.output.split() == [b"SigBlk:", b"0" * 16, b"SigIgn:", b"0" * 16], terminal.output


# exits once it has left a process that ignores the terminal's hangup and keeps writing to it
LEAVE_A_WRITER = (
    """sh -c '(trap "" HUP; touch /tmp/deaf; while :; do echo still; sleep 0.05; done) & """
    """until [ -e /tmp/deaf ]; do sleep 0.01; done; echo leaving; exit 3'"""
)


async def test_l_s5_a_terminal_command_s_exit_is_reported_though_it_left_a_writer_on_the_terminal() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        started = time.monotonic()
        done = await session.pty_exec_start(LEAVE_A_WRITER, tty=True, yield_time_s=10)
        took = time.monotonic() - started
        after = await session.exec("echo next")
    assert (done.process_id, done.exit_code) == (None, 3), (done, took)
    assert b"leaving\r\n" in done.output, done.output
    assert took < 8, took  # the drain's bound (1 s) with room for a loaded machine, under the 10 s asked
    assert (after.exit_code, after.stdout) == (0, b"next\n")
