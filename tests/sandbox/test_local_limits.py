"""Local backend: memory and disk limits that count everything a job can pin (issue 10,
classes 2 and 3). Each attack runs in a fresh session; the test asserts that it was stopped near
its limit, with the limit named, and that the host's memory or disk was not taken."""

from __future__ import annotations

import os

import pytest
from backends import require_backend

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.local import cgroup
from coderoom.sandboxes.session import open_session
from .hostside import disk_free, memory_in_use

MiB = 2**20
LIMIT = 256 * MiB
MEMORY_NAMED = b"memory limit (memory = 268435456 bytes"


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


needs_cgroup = pytest.mark.skipif(cgroup.mode() is cgroup.Mode.NONE, reason="no memory cgroup here")

FOUR_PROCESSES = """
import os
for i in range(4):
    if os.fork() == 0:
        block = bytearray(200 * 2**20)  # touched: every page is charged
        print("allocated", flush=True)
        import time; time.sleep(3)
        os._exit(0)
print(sorted(os.waitstatus_to_exitcode(os.wait()[1]) for _ in range(4)))
"""
MEMFD = "import os\nfd = os.memfd_create('pin')\nfor _ in range(1024):\n    os.write(fd, b'x' * 2**20)\nprint('kept 1G')"
PIN_ATTACKS = {
    "four processes of 200M": ["python3", "-c", FOUR_PROCESSES],
    "memfd_create + 1G": ["python3", "-c", MEMFD],
    "1G into /dev/shm": ["sh", "-c", "head -c 1G /dev/zero > /dev/shm/pin && echo kept 1G && sleep 2"],
    "1G into /tmp": ["sh", "-c", "head -c 1G /dev/zero > /tmp/pin && echo kept 1G && sleep 2"],
}


@needs_cgroup
@pytest.mark.parametrize("argv", PIN_ATTACKS.values(), ids=PIN_ATTACKS.keys())
async def test_memory_pinned_anywhere_in_the_sandbox_stops_at_the_limit(argv: list[str]) -> None:
    in_use_before = memory_in_use()
    spec = SandboxSpec(backend="local", limits=Limits(memory=LIMIT, tmp_size="2G"))
    async with open_session(spec) as session:
        result = await session.exec(*argv, shell=False)
        group = session._inner.sandbox._memory
        assert group is not None
        peak = group.peak()
    assert b"kept 1G" not in result.stdout
    assert result.stdout.count(b"allocated") < 2  # at most one 200M process fits
    assert MEMORY_NAMED in result.stderr, result.stderr
    assert result.exit_code in (137, 0)  # 0: the shell of the four survived, its children did not
    assert peak is not None and peak <= LIMIT  # the kernel's own count of all the session held
    assert memory_in_use() < in_use_before + 64 * MiB  # nothing stays pinned on the host


@needs_cgroup
async def test_the_session_cgroup_is_removed_at_close() -> None:
    async with open_session(SandboxSpec(backend="local", limits=Limits(memory=LIMIT))) as session:
        await session.exec("true")
        group = session._inner.sandbox._memory
        assert group is not None and (group.path / "cgroup.procs").read_text().split()
        limit = int((group.path / "memory.limit_in_bytes").read_text()) if group.mode is cgroup.Mode.V1 else LIMIT
    assert limit == LIMIT
    assert not group.path.exists()


async def test_without_a_cgroup_shared_memory_that_rlimit_as_misses_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cgroup, "detect", lambda: (cgroup.Mode.NONE, None))
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "try:\n    os.memfd_create('pin')\nexcept OSError as e:\n    print('memfd', e.errno)\n"
        "print('shmget', libc.shmget(0, 2**20, 0o1600), ctypes.get_errno())"
    )
    async with open_session(SandboxSpec(backend="local", limits=Limits(memory=LIMIT))) as session:
        assert session._inner.sandbox._memory is None
        result = await session.exec("python3", "-c", code, shell=False)
    assert result.stdout.split(b"\n")[:2] == [b"memfd 1", b"shmget -1 1"]  # EPERM both


# a pause after each file, longer than the watchdog's 0.25 s poll, so "stopped within a poll of
# reaching the limit" does not depend on how fast this machine's disk is
UNLINKED = """
import os, time
held = []
for i in range(20):
    f = open(f"big{i}", "wb")
    for _ in range(100):
        f.write(b"x" * 2**20)
    f.flush()
    os.unlink(f"big{i}")
    held.append(f)
    print("held", len(held), flush=True)
    time.sleep(0.6)
"""
# the same with each file kept by a mapping only, its fds closed (Python's mmap would keep a
# dup): seen through /proc/PID/map_files, which only root may read
MAPPED = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
held = []
for i in range(20):
    with open(f"big{i}", "wb") as f:
        for _ in range(100):
            f.write(b"x" * 2**20)
    fd = os.open(f"big{i}", os.O_RDONLY)
    held.append(libc.mmap(None, 100 * 2**20, 1, 1, fd, 0))  # PROT_READ, MAP_SHARED
    os.close(fd)
    os.unlink(f"big{i}")
    print("held", len(held), flush=True)
    time.sleep(0.6)
"""
DISK_ATTACKS = {
    "fallocate -l 5G": (["sh", "-c", "fallocate -l 5G big || echo refused; ls -s big"], b"refused"),
    "20 x 100M written, kept open, unlinked": (
        ["python3", "-c", UNLINKED],
        b"in deleted files still open), over its workspace_size limit of 314572800 bytes",
    ),
    "20 x 100M written, mapped, closed, unlinked": pytest.param(
        ["python3", "-c", MAPPED],
        b"in deleted files still open), over its workspace_size limit of 314572800 bytes",
        marks=pytest.mark.skipif(os.geteuid() != 0, reason="/proc/PID/map_files is root's to read"),
    ),
}


@pytest.mark.parametrize(("argv", "outcome"), DISK_ATTACKS.values(), ids=DISK_ATTACKS.keys())
async def test_disk_taken_without_growing_a_visible_file_counts(argv: list[str], outcome: bytes) -> None:
    spec = SandboxSpec(backend="local", limits=Limits(workspace_size="300M", memory="1G"))
    async with open_session(spec) as session:
        folder = session._inner.host_dir
        free_before = disk_free(folder)
        result = await session.exec(*argv, shell=False)
        taken = free_before - disk_free(folder)
    assert outcome in result.stdout + result.stderr, result.stderr
    assert result.stdout.count(b"held") <= 4  # stopped within a poll of reaching 300M
    assert taken <= 300 * MiB  # what is left on the host's disk fits the limit


# two 20 MiB files (each under RLIMIT_FSIZE) kept open by a process whose parent is gone
ORPHAN_HOLDS = (
    "(setsid python3 -c \"import os, time\n"
    "held = [open(name, 'wb') for name in ('a', 'b')]\n"
    "for f in held: f.write(b'x' * 20 * 2**20); f.flush(); os.unlink(f.name)\n"
    "time.sleep(30)\" &); sleep 20"
)


async def test_a_deleted_file_held_by_an_orphaned_process_counts() -> None:
    """An orphan is re-parented to its command's init, never to the launcher's own processes,
    which the check skips (disk.LAUNCHER_DEPTH)."""
    spec = SandboxSpec(backend="local", limits=Limits(workspace_size="30M"))
    async with open_session(spec) as session:
        result = await session.exec(ORPHAN_HOLDS)
    assert b"in deleted files still open), over its workspace_size limit of 31457280 bytes" in result.stderr, result.stderr


async def test_posix_fallocate_writes_zeros_and_stops_at_the_workspace_limit() -> None:
    spec = SandboxSpec(backend="local", limits=Limits(workspace_size="300M"))
    code = "import os; os.posix_fallocate(os.open('big', os.O_CREAT | os.O_WRONLY), 0, 5 * 2**30)"
    async with open_session(spec) as session:
        folder = session._inner.host_dir
        free_before = disk_free(folder)
        result = await session.exec("python3", "-c", code, shell=False)
        size = (session._inner.sandbox.workspace_dir / "big").stat().st_size
        taken = free_before - disk_free(folder)
    assert b"File too large" in result.stderr  # EFBIG: no file may outgrow the workspace limit
    assert size <= 300 * MiB and taken <= 300 * MiB + MiB


def test_sandbox_info_says_which_memory_enforcement_is_in_force() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "from coderoom.cli import app; app()", "sandbox", "info"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"memory: {cgroup.mode().value}" in done.stdout
    assert "docker" in done.stdout


async def test_a_short_command_over_the_workspace_limit_is_named_by_the_check_after_it() -> None:
    """Two files, each under RLIMIT_FSIZE, written before the watchdog's first poll: the check
    after the exit names the limit even when no process is left to hold a deleted file (that
    check then skips only the look through /proc)."""
    spec = SandboxSpec(backend="local", limits=Limits(workspace_size="10M"))
    async with open_session(spec) as session:
        result = await session.exec("head -c 6M /dev/zero > a && head -c 6M /dev/zero > b")
    assert result.exit_code != 0
    assert b"over its workspace_size limit of 10485760 bytes" in result.stderr, result.stderr


HOLDS_WHILE_ALIVE = (
    "import os, sys, time\n"
    "f = open('held', 'wb'); f.write(b'x' * 20 * 2**20); f.flush(); os.unlink('held')\n"
    "print('held', flush=True); time.sleep(60)"
)


async def test_a_deleted_file_held_by_a_long_lived_process_counts_when_a_command_ends() -> None:
    """While another job of the session runs (here a long-lived process holding 20M deleted),
    the check after a short command still counts files held open: 20M held + 15M written is
    over 30M, though what a walk finds (15M) is not."""
    spec = SandboxSpec(backend="local", limits=Limits(workspace_size="30M"))
    async with open_session(spec) as session:
        sandbox = session._inner.sandbox
        holder = await sandbox.start_process(["python3", "-c", HOLDS_WHILE_ALIVE], lifetime=None)
        output = b""
        for _ in range(100):
            chunk, _ended = await holder.collect(0.1)
            output += chunk
            if b"held" in output:
                break
        assert b"held" in output
        result = await session.exec("head -c 15M /dev/zero > written")
    assert b"in deleted files still open), over its workspace_size limit of 31457280 bytes" in result.stderr, result.stderr
