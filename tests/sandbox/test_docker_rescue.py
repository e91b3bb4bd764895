"""A bound Docker sandbox whose host went away (issue 20, `sandboxes.docker.rescue`): init.py kills
every other process and keeps the workspace for its recovery window, and the host saves it by a
`docker exec` of init.py --archive-once, which runs the archiver under the same stacked seccomp
filter, undumpable, and only alone with PID 1. An unbound sandbox still ends with its host.

The host going away is the channel's socket closed (what a kill -9 of the owner does to it);
the process-level kills are tests/faults/test_docker_loss.py. Every container made here is
removed by id at the end.
"""

from __future__ import annotations

import asyncio
import base64
import json
import tarfile
import time
from collections.abc import AsyncIterator
from pathlib import PurePosixPath
from typing import Any

import pytest
from backends import require_backend

from coderoom.errors import SandboxLimitExceeded
from coderoom.sandboxes import Limits, SandboxSpec, get_backend

pytestmark = pytest.mark.docker

LIMITS = Limits(timeout=20, workspace_size="64M", pids=64)
GONE_WITHIN_S = 60.0  # generous: a loaded machine


@pytest.fixture(autouse=True)
def _engine() -> None:
    require_backend("docker")


@pytest.fixture
async def sandbox() -> AsyncIterator[Any]:
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=LIMITS))
    try:
        yield box
    finally:
        await box.close()  # removes the container by id, whatever state it is in


def running(box: Any) -> bool:
    import docker.errors

    try:
        return bool(box.client.api.inspect_container(box.container_id)["State"]["Running"])
    except docker.errors.NotFound:
        return False


def processes(box: Any) -> list[str]:
    """The container's processes' command lines, as the engine lists them (no exec of ours)."""
    top = box.client.api.top(box.container_id, ps_args="-o pid,args")
    return [row[-1] for row in top["Processes"]]


async def wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + GONE_WITHIN_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {GONE_WITHIN_S:g} s: {what}"
        await asyncio.sleep(0.1)


def rescued(box: Any) -> Any:
    from coderoom.sandboxes.docker.rescue import RescuedSandbox

    return RescuedSandbox(box.client, box.container_id, LIMITS, root=box.root)


async def host_gone(box: Any) -> None:
    """The host's attach connection drops, as when its process is killed (its socket shut)."""
    import socket

    box.channel()._raw.shutdown(socket.SHUT_RDWR)


async def test_a_bound_sandbox_outlives_its_host_alone_and_is_saved_by_exec(sandbox: Any) -> None:
    await sandbox.write_file(PurePosixPath("kept.txt"), b"before the host went")
    await sandbox.start_process(["sleep", "300"], tty=False, lifetime=None)
    await wait_for(lambda: any("sleep 300" in p for p in processes(sandbox)), "the live process")
    sandbox.keep_for_recovery(120)
    await host_gone(sandbox)
    await wait_for(lambda: not any("sleep 300" in p for p in processes(sandbox)), "every other process killed")
    assert running(sandbox) and len(processes(sandbox)) == 1  # PID 1 alone, waiting
    assert await rescued(sandbox)._kept(GONE_WITHIN_S)
    archive = await rescued(sandbox).archive(snapshot=True)
    with tarfile.open(fileobj=archive) as tar:
        assert tar.extractfile("kept.txt").read() == b"before the host went"  # type: ignore[union-attr]
    assert running(sandbox) and len(processes(sandbox)) == 1  # the exec is gone, nothing else started


async def test_a_bound_sandbox_ends_by_itself_at_its_window(sandbox: Any) -> None:
    sandbox.keep_for_recovery(2)
    await host_gone(sandbox)
    await asyncio.sleep(0.5)
    assert running(sandbox)
    await wait_for(lambda: not running(sandbox), "the end at the window (and AutoRemove)")


async def test_an_unbound_sandbox_ends_with_its_host(sandbox: Any) -> None:
    await host_gone(sandbox)
    await wait_for(lambda: not running(sandbox), "the end with its host")


async def test_a_window_over_the_cap_is_refused(sandbox: Any) -> None:
    reply = await sandbox.call({"op": "keep", "window": 3601}, wait=20, reply_bytes=4096)
    assert "between 0 and 3600 s" in reply["error"]


async def test_the_exec_archiver_refuses_to_run_beside_another_process(sandbox: Any) -> None:
    """PID 1 waits for a recovery, and a process started after its kill passes (a `docker exec`
    of the test's) runs: --archive-once reads nothing."""
    import subprocess

    sandbox.keep_for_recovery(120)
    await host_gone(sandbox)
    assert await rescued(sandbox)._kept(GONE_WITHIN_S)
    subprocess.run(["docker", "exec", "-d", sandbox.container_id, "sleep", "300"], check=True, timeout=60)
    await wait_for(lambda: any("sleep 300" in p for p in processes(sandbox)), "the late process")
    with pytest.raises(SandboxLimitExceeded, match="other processes still run in the container"):
        await rescued(sandbox).archive()


async def test_the_exec_archiver_refuses_while_pid_1_is_not_kept(sandbox: Any) -> None:
    """The host still attached (or PID 1 still killing): PID 1 has not taken its kept name, and
    --archive-once refuses, so it never races a normal archive or the kill passes."""
    stream = _stream()
    reply = await asyncio.to_thread(rescued(sandbox)._exec_archiver, probe_environment(sandbox.client), stream)
    assert reply["code"] == 1 and b"PID 1 is not waiting for a recovery" in base64.b64decode(reply["err"])
    assert not await rescued(sandbox)._kept(1.0)


_PROBE = """
import ctypes, os
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
os.write(1, ("%s %s %d %d" % (status["Seccomp_filters"].strip(), status["NoNewPrivs"].strip(), dumpable, os.getuid())).encode())
"""


async def test_the_exec_archiver_runs_under_the_command_filter_undumpable(sandbox: Any) -> None:
    """As init.py's forked helper does (tests/sandbox/test_docker_core.py): Docker's filter and
    coderoom's stacked (2), no new privileges, not dumpable, the sandbox's uid."""
    sandbox.keep_for_recovery(120)
    await host_gone(sandbox)
    assert await rescued(sandbox)._kept(GONE_WITHIN_S)
    stream = _stream()
    environment = probe_environment(sandbox.client)
    reply = await asyncio.to_thread(rescued(sandbox)._exec_archiver, environment, stream)
    stream.end()
    assert reply["code"] == 0, base64.b64decode(reply["err"])
    assert stream.read() == b"2 1 0 1000"


async def test_the_exec_archiver_loads_no_library_a_manifest_variable_names() -> None:
    """A container whose environment (a manifest's) has LD_PRELOAD naming a workspace file: the
    sandbox writes that file, and the host's exec loads nothing from it (the loader's variables
    are blanked: `helpers.exec_environment`); the file here is no ELF, so a load would be said
    on stderr ("cannot be preloaded")."""
    from coderoom.sandboxes.docker.container import DockerSandbox, create_container, remove_container
    from coderoom.sandboxes.docker.image import docker_client, ensure_image
    from coderoom.sandboxes.docker.request import create_request

    client = docker_client()
    program = seccomp_program_of(client)
    image = await asyncio.to_thread(ensure_image, SandboxSpec(backend="docker", limits=LIMITS))
    request = create_request(LIMITS, image=image, program=program, environment={"LD_PRELOAD": "/workspace/lib.so"})
    container = await asyncio.to_thread(create_container, client, request)
    box = DockerSandbox(client, container, LIMITS)
    try:
        await asyncio.to_thread(client.api.start, container)
        await box.write_file(PurePosixPath("lib.so"), b"not a library")
        probe = await box.exec(["sh", "-c", "true"])
        assert b"cannot be preloaded" in probe.stderr  # what a load from it looks like
        box.keep_for_recovery(120)
        await host_gone(box)
        assert await rescued(box)._kept(GONE_WITHIN_S)
        archive = await rescued(box).archive()
        with tarfile.open(fileobj=archive) as tar:
            assert tar.extractfile("lib.so").read() == b"not a library"  # type: ignore[union-attr]
        reply = await asyncio.to_thread(rescued(box)._exec_archiver, probe_environment(client), _stream())
        assert reply["code"] == 0 and base64.b64decode(reply["err"]) == b""
    finally:
        await asyncio.to_thread(remove_container, client, container)


def seccomp_program_of(client: Any) -> bytes:
    from coderoom.sandboxes.docker.container import seccomp_program

    return seccomp_program(client)


def probe_environment(client: Any) -> dict[str, str]:
    from coderoom.sandboxes.docker.request import INIT_ENV, INIT_SOURCE, SECCOMP_ENV
    from coderoom.sandboxes.docker.rescue import ARCHIVE_ENV

    return {
        INIT_ENV: INIT_SOURCE,
        SECCOMP_ENV: base64.b64encode(seccomp_program_of(client)).decode(),
        ARCHIVE_ENV: json.dumps({"source": _PROBE, "args": None, "timeout": 10}),
    }


def _stream() -> Any:
    from coderoom.sandboxes.docker.archive import ArchiveStream

    return ArchiveStream(1 << 20)
