"""The SDK-free docker core (`DockerSandbox`), and what the host reads from the container when it
archives the workspace (issue 10): bounded in bytes and time whatever the sandbox left there
(class 4: a sparse 50 GB file), and out of reach of sandbox code (class 5: a background process
that tries to stop, trace or rewrite the archiving helper).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from backends import require_backend

from coderoom.errors import SandboxLimitExceeded
from coderoom.sandboxes import Limits, SandboxSpec, get_backend

from .host_temp import host_temp_peak

pytestmark = pytest.mark.docker

LIMITS = Limits(timeout=20, workspace_size="64M", file_size="64G", pids=64)


@pytest.fixture(autouse=True)
def _engine() -> None:
    require_backend("docker")


@pytest.fixture
async def sandbox() -> AsyncIterator[Any]:
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=LIMITS))
    try:
        yield box
    finally:
        await box.close()


def _empty(folder: Path) -> Path:
    """A new folder for one step's host temp files (`host_temp_peak`)."""
    folder.mkdir()
    return folder


def _names(archive: Any) -> dict[str, bytes | None]:
    with tarfile.open(fileobj=archive) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isreg() else None) for m in tar}  # type: ignore[union-attr]


_NO_SDK = """
import asyncio, sys
from coderoom.sandboxes import SandboxSpec, get_backend
async def main():
    box = await get_backend("docker").start(SandboxSpec(backend="docker"))
    try:
        print((await box.exec(["id", "-u"])).stdout.decode().strip())
    finally:
        await box.close()
asyncio.run(main())
print(sorted(m for m in sys.modules if m == "agents" or m.startswith("agents.")))
"""


def test_the_core_runs_without_the_agents_sdk() -> None:
    done = subprocess.run([sys.executable, "-c", _NO_SDK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == ["1000", "[]", ""]


async def test_exec_env_stdin_and_wall_clock(sandbox: Any) -> None:
    result = await sandbox.exec(["sh", "-c", 'echo "$GREETING"; cat; pwd'], stdin=b"in\n", env={"GREETING": "hi"})
    assert (result.exit_code, result.stdout) == (0, b"hi\nin\n/workspace\n")
    started = time.monotonic()
    slow = await sandbox.exec(["sh", "-c", "setsid sleep 300 & sleep 301"], timeout=1)
    assert time.monotonic() - started < 5
    assert (slow.exit_code, slow.timed_out, slow.stopped_by) == (124, True, "the 1 s wall-clock limit")


async def test_files_never_go_through_a_symlink(sandbox: Any) -> None:
    await sandbox.write_file(PurePosixPath("out/a.txt"), b"data")
    assert await sandbox.read_file(PurePosixPath("out/a.txt"), max_bytes=4) == b"data"
    with pytest.raises(OverflowError, match="3 byte read limit"):
        await sandbox.read_file(PurePosixPath("out/a.txt"), max_bytes=3)
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file(PurePosixPath("missing"), max_bytes=3)
    await sandbox.exec(["sh", "-c", "ln -s /etc/passwd pw && ln -s /tmp out/t"])
    with pytest.raises(OSError, match="symlink"):
        await sandbox.read_file(PurePosixPath("pw"), max_bytes=1 << 20)
    with pytest.raises(OSError, match="symlink"):
        await sandbox.write_file(PurePosixPath("out/t/x"), b"no")
    assert (await sandbox.exec(["ls", "/tmp/x"])).exit_code != 0


async def test_archive_and_hydrate_round_trip(sandbox: Any) -> None:
    await sandbox.exec(["sh", "-c", "mkdir -p d/e && echo one > d/e/f && ln -s e/f d/l && mkfifo p"])
    archive = await sandbox.archive(skip=[PurePosixPath("d/e/skipped")])
    other = await get_backend("docker").start(SandboxSpec(backend="docker", limits=LIMITS))
    try:
        await other.hydrate(archive)
        listing = await other.exec(["sh", "-c", "find . | sort; readlink d/l; cat d/l"])
    finally:
        await other.close()
    assert listing.stdout.decode().split("\n") == [".", "./d", "./d/e", "./d/e/f", "./d/l", "e/f", "one", ""]


# -- class 4: archiving is bounded ---------------------------------------------------------------


async def test_a_sparse_50g_file_is_refused_at_once_without_host_disk(sandbox: Any, tmp_path: Path) -> None:
    """The host's temp files are counted in a folder of the test's own (`host_temp_peak`), so
    nothing else this process or the machine holds in /tmp counts; a real archive afterwards
    shows that the measure sees the step's temp file."""
    made = await sandbox.exec(["sh", "-c", "echo kept > small && truncate -s 50G sparse && stat -c '%s %b' sparse"])
    assert made.stdout == b"53687091200 0\n", made.stderr  # 50 GB apparent, no block allocated
    started = time.monotonic()
    with host_temp_peak(_empty(tmp_path / "refused")) as peak, pytest.raises(SandboxLimitExceeded) as refused:
        await sandbox.archive()
    took = time.monotonic() - started
    message = str(refused.value)
    assert "'sparse' is 53687091200 bytes (0 allocated)" in message and "workspace_size limit of 67108864" in message
    assert took < 5  # the sandbox-side check comes before a byte is read (measured: ~0.05 s)
    assert peak[0] < 1 << 20  # no host temp file holds the zeros (measured: 0)
    assert (await sandbox.exec(["rm", "sparse"])).exit_code == 0  # commands run after the refusal
    with host_temp_peak(_empty(tmp_path / "kept")) as kept:
        archive = await sandbox.archive()
    with archive:
        assert _names(archive) == {"small": b"kept\n"}
    assert kept[0] >= tarfile.RECORDSIZE  # the clean tar, a host temp file, was seen


async def test_hard_links_count_once_per_name(sandbox: Any) -> None:
    """A 40 MB file under two names would be 80 MB in the tar: the budget counts names."""
    await sandbox.exec(["sh", "-c", "head -c 40000000 /dev/zero > a && ln a b"])
    with pytest.raises(SandboxLimitExceeded, match="'b' is 40000000 bytes"):
        await sandbox.archive()


async def test_the_host_stops_reading_at_its_budget(sandbox: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Whatever the container sends, the host keeps at most the stream budget: here an archiver
    that writes zeros forever, against a 64 MB workspace with a 10-entry allowance."""
    from coderoom.sandboxes.docker import container

    monkeypatch.setattr(container, "ARCHIVER_SOURCE", "import os\nwhile True: os.write(1, bytes(1 << 16))")
    monkeypatch.setattr(container, "MAX_ENTRIES", 10)
    started = time.monotonic()
    with host_temp_peak(_empty(tmp_path / "host-temp")) as peak, pytest.raises(SandboxLimitExceeded, match="byte limit"):
        await sandbox.archive()
    assert time.monotonic() - started < 30
    assert peak[0] < 1 << 20  # the zeros are no tar: nothing reached the output file
    assert (await sandbox.exec(["echo", "alive"])).stdout == b"alive\n"  # the helper is gone


async def test_a_hanging_archiver_meets_the_deadline(sandbox: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from coderoom.sandboxes.docker import container

    monkeypatch.setattr(container, "ARCHIVER_SOURCE", "import time\ntime.sleep(3600)")
    monkeypatch.setattr(container, "ARCHIVE_DEADLINE_S", 2.0)
    started = time.monotonic()
    with pytest.raises(SandboxLimitExceeded, match="2 s deadline"):
        await sandbox.archive()
    assert time.monotonic() - started < 10
    assert (await sandbox.exec(["echo", "alive"])).stdout == b"alive\n"  # commands run again: it is dead


# -- class 5: helper commands cannot be reached --------------------------------------------------

# With --daemon (started by a command): double fork, SIGTERM and SIGHUP ignored, under `nohup`;
# it stays in the command's session, as a `setsid` leftover is killed when any command ends.
# Without (a live process of pty_exec_start, the kernel's path): itself. It beats
# into a heartbeat file and goes for the archiving helper: any process running PID 1's program
# (a forked child of init.py) or the `tar`/`find`/`chmod` a host could run, with SIGSTOP,
# ptrace(PTRACE_ATTACH) and a write into its memory through /proc/PID/mem.
ATTACKER = r"""
import ctypes, os, signal, sys, time
if sys.argv[1:] == ["--daemon"]:
    if os.fork(): os._exit(0)
    if os.fork(): os._exit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
libc = ctypes.CDLL(None, use_errno=True)
init = open("/proc/1/cmdline", "rb").read()
me, beat, log = os.getpid(), 0, open("/workspace/attacks", "a", buffering=1)
while True:
    beat += 1
    with open("/workspace/heartbeat.tmp", "w") as f:
        f.write(str(beat))
    os.replace("/workspace/heartbeat.tmp", "/workspace/heartbeat")
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        pid = int(name)
        try:
            cmd = open("/proc/%d/cmdline" % pid, "rb").read()
        except OSError:
            continue
        if cmd != init and cmd.split(b"\0")[0].rsplit(b"/")[-1] not in (b"tar", b"find", b"chmod"):
            continue
        os.kill(pid, signal.SIGSTOP)
        traced = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
        try:
            with open("/proc/%d/mem" % pid, "wb") as mem:
                mem.write(b"x")
            wrote = True
        except OSError:
            wrote = False
        log.write("%d stopped traced=%d mem=%s\n" % (pid, traced, wrote))
    time.sleep(0.002)
"""


ATTACKER_START_S = 3.0  # then it has beaten hundreds of times (checked in the archive)


async def _attacker_running(sandbox: Any) -> asyncio.Task[Any]:
    """Start ATTACKER from a command that is still running when the host archives. (No polling
    meanwhile: a command is briefly PID 1's forked child too, and the attacker would stop it.)"""
    await sandbox.write_file(PurePosixPath("attacker.py"), ATTACKER.encode())
    holder = asyncio.ensure_future(
        sandbox.exec(["sh", "-c", "nohup python3 attacker.py --daemon >/dev/null 2>&1 & sleep 60"])
    )
    await asyncio.sleep(ATTACKER_START_S)
    return holder


async def test_every_process_is_dead_before_the_archiver_runs(sandbox: Any) -> None:
    holder = await _attacker_running(sandbox)
    started = time.monotonic()
    archive = await sandbox.archive()
    took = time.monotonic() - started
    assert took < 10
    assert (await holder).exit_code == 137  # the command holding it was killed too
    names = _names(archive)
    assert int(names["heartbeat"] or 0) >= 3  # it was running
    # what the archive holds is what the workspace holds: nothing beat after the archive was cut
    assert names["heartbeat"] == await sandbox.read_file(PurePosixPath("heartbeat"), max_bytes=32)
    assert names["attacks"] == await sandbox.read_file(PurePosixPath("attacks"), max_bytes=1 << 20)
    await asyncio.sleep(0.3)
    assert names["heartbeat"] == await sandbox.read_file(PurePosixPath("heartbeat"), max_bytes=32)
    ps = await sandbox.exec(["ps", "-eo", "pid=,args="])
    pids_and_programs = [line.split()[:2] for line in ps.stdout.decode().splitlines()]
    programs = [PurePosixPath(pid_program[1]).name for pid_program in pids_and_programs]
    assert programs == ["python3", "ps"]  # init (started by absolute path), and ps
    assert pids_and_programs[0][0] == "1"


async def test_an_sdk_session_kernel_process_is_killed_before_archiving() -> None:
    """A live process (pty_exec_start: PTY sessions, the run_python kernel's path) is stopped by
    init.py before the archiver runs, like every other process of the container."""
    from coderoom.sandboxes.session import open_session

    async with open_session(SandboxSpec(backend="docker", limits=LIMITS)) as session:
        await session.write(PurePosixPath("attacker.py"), __import__("io").BytesIO(ATTACKER.encode()))  # type: ignore[arg-type]
        await session.pty_exec_start("python3", "attacker.py", shell=False)
        await asyncio.sleep(ATTACKER_START_S)
        archive = await session.persist_workspace()
        names = _names(archive)
        after = await session.exec("cat heartbeat; echo; ps -eo args= | grep -c '^python3 attacker' || true")
    beat, count = after.stdout.split()
    assert names["heartbeat"] == beat and int(beat) >= 3
    assert count == b"0"


_HELPER_PROBE = """
import ctypes, os
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
os.write(1, ("%s %s %d" % (status["Seccomp_filters"].strip(), status["NoNewPrivs"].strip(), dumpable)).encode())
"""


async def test_helpers_run_under_the_command_filter_and_undumpable(sandbox: Any) -> None:
    """The archiver's process (a forked child of PID 1) carries coderoom's stacked filter, as
    every command does (2 filters: Docker's and ours), and cannot be traced by the sandbox."""
    import base64

    chunks: list[bytes] = []
    reply = await sandbox.channel().call(
        {"op": "helper", "source": _HELPER_PROBE, "args": None, "timeout": 10},
        wait=20, reply_bytes=4096, sink=lambda r: chunks.append(base64.b64decode(r["data"])),
    )  # fmt: skip
    assert reply["code"] == 0, base64.b64decode(reply["err"])
    assert b"".join(chunks) == b"2 1 0"
