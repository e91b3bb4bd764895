"""The docker sandbox's seccomp: Docker's default profile, with the local backend's filter
(seccomp.py) stacked on it inside the container, for commands and for PTY processes (the
Python kernel too, through pty_exec_start): all of them children of init.py.

The catalogue's outcomes (KERN-07, KERN-10, KERN-11, PROC-08, ...) are checked on every backend
by test_attack_catalogue.py; these tests check the mechanism, against a control container that
has Docker's profile alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from backends import require_backend

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session
from coderoom.sandboxes.seccomp import DENIED_SYSCALLS, host_arch

pytestmark = pytest.mark.docker

LIMITS = Limits(timeout=30)
ARCH = host_arch()
# x32 getpid: Docker's profile allows x32 (a sub-architecture of amd64); coderoom's filter kills it
X32_GETPID = 0x40000000 + 39 if ARCH is not None and ARCH.x32_bit else 0

# argv: x32 call number (0: skip), then the numbers to call with all-zero arguments, each in a
# forked child (where a call gets through, e.g. ptrace(TRACEME), its effect dies with the child).
PROBE = r"""
import ctypes, errno, os, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def sc(nr):
    pid = os.fork()
    if pid == 0:
        r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(0)] * 6)
        os._exit(0 if r >= 0 else ctypes.get_errno())
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return "OK" if code == 0 else errno.errorcode.get(code, str(code))
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print("nnp", status["NoNewPrivs"].strip(), "filters", status["Seccomp_filters"].strip())
print("denied", *sorted({sc(int(nr)) for nr in sys.argv[2:]}))
try:
    socket.socket(40, socket.SOCK_STREAM)  # AF_VSOCK
    print("vsock OK")
except OSError as e:
    print("vsock", errno.errorcode[e.errno])
if sys.argv[1] != "0":
    code = "import ctypes; ctypes.CDLL(None).syscall(%s)" % sys.argv[1]
    print("x32", subprocess.run([sys.executable, "-c", code]).returncode)
"""


def _argv() -> list[str]:
    assert ARCH is not None
    numbers = [ARCH.table[name] for name in DENIED_SYSCALLS if name in ARCH.table]
    return ["python3", "-c", PROBE, str(X32_GETPID), *map(str, numbers)]


STACKED = ["nnp 1 filters 2", "denied EPERM", "vsock EAFNOSUPPORT"] + (["x32 -31"] if X32_GETPID else [])


@pytest.fixture(autouse=True)
def _engine() -> None:
    require_backend("docker")
    if ARCH is None:
        pytest.skip("no seccomp syscall table for this CPU")


@pytest.fixture
async def session() -> AsyncIterator[Any]:
    async with open_session(SandboxSpec(backend="docker", limits=LIMITS)) as s:
        yield s


async def test_container_uses_dockers_default_profile(session: Any) -> None:
    from coderoom.sandboxes.docker.image import docker_client

    host = docker_client().api.inspect_container(session.state.container_id)["HostConfig"]
    assert host["SecurityOpt"] == ["no-new-privileges"]  # no `seccomp=`: Docker's default


async def test_commands_run_under_both_filters(session: Any) -> None:
    result = await session.exec(*_argv(), shell=False)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.decode().splitlines() == STACKED


@pytest.mark.parametrize("tty", [False, True])
async def test_pty_processes_run_under_both_filters(session: Any, tty: bool) -> None:
    """PTY sessions and the kernel (pty_exec_start) are init.py's jobs, not `docker exec`
    processes: the same stacked filter, and no sandbox-written login profile runs."""
    await session.exec("echo 'echo PROFILE-RAN' > /tmp/.profile")
    update = await session.pty_exec_start(*_argv(), shell=False, tty=tty, yield_time_s=20)
    assert update.exit_code == 0, update.output
    assert update.output.decode().replace("\r\n", "\n").splitlines() == STACKED


def test_dockers_profile_alone_lets_these_calls_through() -> None:
    """Control: the same probe in a container with only Docker's profile gives other answers, so
    the two tests above see coderoom's filter, not Docker's."""
    from coderoom.sandboxes.docker.image import docker_client
    from coderoom.sandboxes.docker.labels import DEFAULT_IMAGE

    out = docker_client().containers.run(
        DEFAULT_IMAGE, _argv(), remove=True, network_mode="none", user="1000:1000",
        cap_drop=["ALL"], security_opt=["no-new-privileges"], entrypoint=[],
    ).decode().splitlines()  # fmt: skip
    assert out[0] == "nnp 1 filters 1"
    assert out[1] != "denied EPERM"  # some of the deny list reaches the kernel
    if X32_GETPID:
        assert out[-1] == "x32 0"


async def test_no_filter_no_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program the kernel rejects: PID 1 refuses every command, so the session does not open."""
    from agents.sandbox.errors import ExecNonZeroError

    from coderoom.sandboxes.docker import request  # the one builder of the container's settings

    monkeypatch.setattr(request, "build_filter", lambda arch: b"\xff" * 8)
    with pytest.raises(ExecNonZeroError, match="seccomp filter could not be installed"):
        async with open_session(SandboxSpec(backend="docker", limits=LIMITS)):
            pass
