"""Local backend: the per-session launcher. Each command still gets namespaces of its own, the
launcher stays out of the payload's reach, and a lost launcher costs one command, not the session."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session
from coderoom.sandboxes.local.launcher import LAUNCHER_LOST

from .hostside import host_processes_with, seen_running


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


def inner(session):  # type: ignore[no-untyped-def]
    return session._inner.sandbox  # the LocalSandbox under the SDK adapter


async def running(session, marker: str) -> asyncio.Future:  # type: ignore[no-untyped-def]
    """A 30 s command carrying `marker` in its command line, once the host sees it running."""
    return await seen_running(session, f"sh -c 'sleep 30; : {marker}'", marker)


async def test_each_command_has_its_own_pid_namespace_and_no_capabilities() -> None:
    status = "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status"
    async with open_session(SandboxSpec(backend="local")) as session:
        # at once: a namespace's number is the kernel's to reuse once its last process is gone
        looks = "readlink /proc/self/ns/pid /proc/self/ns/mnt /proc/self/ns/ipc; sleep 1"
        first, second = await asyncio.gather(session.exec(looks), session.exec(looks))
        pids = await session.exec("ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline | tr '\\0' ' '")
        caps = await session.exec(status)
    assert set(first.stdout.split()).isdisjoint(second.stdout.split())
    count, init = pids.stdout.decode().split("\n", 1)
    assert int(count) <= 4  # init, sh, ls, grep: nothing of the launcher or other commands
    assert "launcher.py" in init  # pid 1 is the command's init, forked from the launcher
    fields = dict(line.split(":\t") for line in caps.stdout.decode().splitlines())
    assert {k: int(v, 16) for k, v in fields.items() if k.startswith("Cap")} == dict.fromkeys(
        ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"], 0
    )
    assert (fields["NoNewPrivs"], fields["Seccomp"]) == ("1", "2")


async def test_concurrent_commands_cannot_see_each_other() -> None:
    marker = f"cr-neighbour-{uuid.uuid4().hex[:8]}"
    async with open_session(SandboxSpec(backend="local")) as session:
        sleeper = await running(session, marker)
        pattern = f"{marker[:-1]}[{marker[-1]}]"  # does not match this command's own line
        look = await session.exec(f"cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c '{pattern}'")
        assert look.stdout.split() == [b"0"]  # no pid of it to see, signal or trace
        assert not sleeper.done()
        sleeper.cancel()
        await asyncio.gather(sleeper, return_exceptions=True)
    assert not host_processes_with(marker)


async def test_a_lost_launcher_fails_its_running_command_and_is_replaced() -> None:
    marker = f"cr-lost-{uuid.uuid4().hex[:8]}"
    async with open_session(SandboxSpec(backend="local")) as session:
        command = await running(session, marker)
        os.kill(inner(session)._launcher.pid, signal.SIGKILL)  # bwrap itself, as an OOM killer would
        lost = await asyncio.wait_for(command, 10)
        assert lost.exit_code == LAUNCHER_LOST
        assert not host_processes_with(marker)  # the command died with its launcher
        again = await session.exec("echo still here")
        assert (again.exit_code, again.stdout) == (0, b"still here\n")


async def test_the_launcher_and_every_command_die_with_the_session() -> None:
    marker = f"cr-close-{uuid.uuid4().hex[:8]}"
    async with open_session(SandboxSpec(backend="local")) as session:
        command = await running(session, marker)
        launcher_pid = inner(session)._launcher.pid
    await asyncio.gather(command, return_exceptions=True)
    assert not host_processes_with(marker)
    assert not Path(f"/proc/{launcher_pid}").exists()


async def test_many_concurrent_commands_and_a_large_command_line() -> None:
    big = "x" * 100_000  # one argument near the kernel's 128 KiB cap: the request goes by memfd
    async with open_session(SandboxSpec(backend="local")) as session:
        results = await asyncio.gather(*(session.exec(f"echo {i}; sleep 0.2") for i in range(12)))
        assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(12)]
        sized = await session.exec("sh", "-c", 'printf %s "$1" | wc -c', "sh", big, shell=False)
        assert (sized.exit_code, sized.stdout.strip()) == (0, b"100000")


async def test_a_timeout_kills_one_command_and_spares_the_others() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        slow = asyncio.ensure_future(session.exec("sleep 3; echo survived"))
        with pytest.raises(Exception, match="(?i)timeout|timed out"):
            await session.exec("sleep 30", timeout=0.5)
        assert (await slow).stdout == b"survived\n"



def mount_namespaces_held(bwrap_pid: int) -> int:
    """How many mount namespace fds the session's processes hold (the launcher's, per slot)."""
    from coderoom.sandboxes.local.disk import session_pids

    held = 0
    for pid in session_pids(bwrap_pid):
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                held += os.readlink(f"/proc/{pid}/fd/{name}").startswith("mnt:[")
            except OSError:
                continue
    return held


async def test_the_launcher_lets_each_ended_command_s_mount_namespace_go() -> None:
    """The launcher holds a slot's mount namespace so that init's exit does not unmount it before
    the exit is reported; it lets it go right after the report, before the next request."""
    async with open_session(SandboxSpec(backend="local")) as session:
        for _ in range(8):
            assert (await session.exec("true")).exit_code == 0
        held = mount_namespaces_held(inner(session)._launcher.pid)
    assert held <= 2  # the next slot's, and the last command's if not yet let go (one per command ever run if none were)


def test_the_launcher_imports_only_modules_of_c() -> None:
    """Every module the launcher imports at start is built into Python or a C extension: a module
    of Python source (os, signal, struct) runs its own imports and code in every session's start
    (os.py alone was 1.5 ms, issue 25). Terminal commands import theirs when they need them."""
    import ast
    import importlib.machinery
    import importlib.util

    from coderoom.sandboxes.local import spawn

    tree = ast.parse(spawn.LAUNCHER_SOURCE.read_text())
    names = [alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names]
    assert "posix" in names and "os" not in names
    for name in names:
        spec = importlib.util.find_spec(name)
        assert spec is not None
        assert spec.loader is importlib.machinery.BuiltinImporter or isinstance(
            spec.loader, importlib.machinery.ExtensionFileLoader
        ), f"{name} is no C module ({spec.origin})"
