"""Launcher speed changes attack pass (attacksp, 2026-12-07), the workspace check: S-P1..S-P3.

The check after (and every 0.25 s during) a command counts files deleted but still held open,
found through /proc/PID/fd of the session's payload processes (`disk.LAUNCHER_DEPTH`). A
process's /proc/PID/fd is its thread group leader's file table only: a leader that has exited
alone (its other threads run on) shows none, and a thread made without CLONE_FILES has a table of
its own that the leader's does not show. Each of these held 40 MiB past a 30 MiB workspace_size
for as long as it liked, unseen."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session

# two 20 MiB files written, unlinked and held by a second thread; the main thread then exits
# alone (SYS_exit, not exit_group), so the process's leader is a zombie while the holder runs
LEADER_GONE = """
import ctypes, os, platform, threading, time
def hold():
    time.sleep(1.5)  # the leader is gone by then
    held = [open(name, 'wb') for name in ('a', 'b')]
    for f in held:
        f.write(b'x' * 20 * 2**20); f.flush(); os.unlink(f.name)
    print('held', flush=True)
    time.sleep(8)
    print('survived', flush=True)
threading.Thread(target=hold).start()
time.sleep(1)
ctypes.CDLL(None).syscall({'x86_64': 60, 'aarch64': 93}[platform.machine()], 0)
"""

# the same kept by mappings only (fds closed), made by the thread once the leader is gone: the
# zombie leader's /proc/PID/maps is empty too
LEADER_GONE_MAPPED = """
import ctypes, os, platform, threading, time
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def hold():
    time.sleep(1.5)
    held = []
    for name in ('a', 'b'):
        with open(name, 'wb') as f:
            f.write(b'x' * 20 * 2**20)
        fd = os.open(name, os.O_RDONLY)
        held.append(libc.mmap(None, 20 * 2**20, 1, 1, fd, 0))  # PROT_READ, MAP_SHARED
        os.close(fd); os.unlink(name)
    print('held', flush=True)
    time.sleep(8)
    print('survived', flush=True)
threading.Thread(target=hold).start()
time.sleep(1)
libc.syscall({'x86_64': 60, 'aarch64': 93}[platform.machine()], 0)
"""

# the same held by a thread with a file table of its own (clone without CLONE_FILES) while the
# leader, whose table /proc/PID/fd shows, sleeps
OWN_FILE_TABLE = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
static char chunk[1 << 20];
static int holder(void *unused) {
    const char *names[] = {"a", "b"};
    for (int i = 0; i < 2; i++) {
        long fd = syscall(SYS_openat, AT_FDCWD, names[i], O_CREAT | O_WRONLY | O_TRUNC, 0600);
        for (int m = 0; m < 20; m++) syscall(SYS_write, fd, chunk, sizeof chunk);
        syscall(SYS_unlinkat, AT_FDCWD, names[i], 0);
    }
    syscall(SYS_write, 1, "held\n", 5);
    for (;;) syscall(SYS_pause);
}
int main(void) {
    char *stack = malloc(1 << 16);
    clone(holder, stack + (1 << 16), CLONE_VM | CLONE_FS | CLONE_SIGHAND | CLONE_THREAD, NULL);
    sleep(8);
    write(1, "survived\n", 9);
    return 0;
}
"""

STOPPED = b"in deleted files still open), over its workspace_size limit of 31457280 bytes"


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


@pytest.mark.parametrize(
    "program",
    [
        LEADER_GONE,
        pytest.param(
            LEADER_GONE_MAPPED,
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="/proc/PID/map_files is root's to read"),
        ),
    ],
    ids=["open", "mapped"],
)
async def test_s_p1_a_deleted_file_held_by_a_thread_whose_leader_has_exited_counts(program: str) -> None:
    spec = SandboxSpec(backend="local", limits=Limits(workspace_size="30M"))
    async with open_session(spec) as session:
        result = await session.exec("python3", "-c", program, shell=False)
    assert STOPPED in result.stderr, (result.stdout, result.stderr)
    assert b"survived" not in result.stdout


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to build the thread")
async def test_s_p2_a_deleted_file_held_by_a_thread_with_its_own_file_table_counts(tmp_path: Path) -> None:
    spec = SandboxSpec(backend="local", limits=Limits(workspace_size="30M"))
    async with open_session(spec) as session:
        binary = session._inner.sandbox.workspace_dir / "own"  # built on the host (no cc inside), run inside
        source = tmp_path / "own.c"
        source.write_text(OWN_FILE_TABLE)
        subprocess.run(["cc", "-O1", "-o", str(binary), str(source)], check=True)
        binary.chmod(0o755)
        result = await session.exec("./own")
    assert STOPPED in result.stderr, (result.stdout, result.stderr)
    assert b"survived" not in result.stdout
