"""Host helpers sandbox code cannot freeze (issue 19), written as the attack: a run_python cell
starts a thread that SIGSTOPs every process that appears after it (and ptraces it, where it
can). The output check behind the nudge, reading an output back and archiving the workspace
still finish, within a bound, on every backend.

Docker: those helpers run as a uid no sandbox process has (`docker/helpers.py`), and the archive
kills every sandbox process first. Local: every command, a helper too, has a PID namespace of its
own, so the kernel sees none of them.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from coderoom.artifacts import check_in_session
from coderoom.jobs import OutputSpec
from coderoom.sandboxes import Limits, SandboxSpec, get_backend
from coderoom.sandboxes.session import open_session
from coderoom.tools.python_kernel import RunPythonTool

LIMITS = Limits(timeout=20)
BOUND_S = 15.0  # well under the 20 s command wall clock a frozen helper would wait out

STOP_EVERY_NEW_PROCESS = """
import ctypes, os, signal, threading
libc = ctypes.CDLL(None, use_errno=True)
seen = {int(p) for p in os.listdir('/proc') if p.isdigit()}
def stopper():
    while True:
        for name in os.listdir('/proc'):
            if name.isdigit() and int(name) not in seen:
                seen.add(int(name))
                try:
                    os.kill(int(name), signal.SIGSTOP)
                except OSError:
                    pass
                libc.ptrace(16, int(name), 0, 0)  # PTRACE_ATTACH
threading.Thread(target=stopper, daemon=True).start()
open('output/r.md', 'w').write('# report')
'armed'
"""


async def test_a_process_stopping_cell_cannot_freeze_the_hosts_helpers(backend: str) -> None:
    async with open_session(SandboxSpec(backend=backend, limits=LIMITS)) as session:
        tool = RunPythonTool(session, images=False, timeout=20)
        await tool.run("import os\nos.makedirs('output', exist_ok=True)")
        assert "'armed'" in await tool.run(STOP_EVERY_NEW_PROCESS)
        started = time.monotonic()
        checks = await check_in_session(session, [OutputSpec(path="output/r.md"), OutputSpec(path="output/no.md")])
        read = await session.read_bounded(Path("output/r.md"), max_bytes=100)
        took = time.monotonic() - started
        archive = await session.persist_workspace()  # kills the kernel first (docker: every process)
        archived = time.monotonic() - started
    assert [check.ok for check in checks] == [True, False], checks
    assert read == b"# report"
    assert took < BOUND_S, f"the helpers took {took:.1f} s"
    assert archived < 2 * BOUND_S and archive.read(1), f"the archive took {archived:.1f} s"


async def test_the_attack_is_real_on_docker_commands() -> None:
    """What the helpers are kept out of: an ordinary docker command started after the cell is
    stopped, and only the wall clock ends it (exit 124)."""
    from backends import require_backend

    require_backend("docker")
    async with open_session(SandboxSpec(backend="docker", limits=Limits(timeout=5))) as session:
        tool = RunPythonTool(session, images=False, timeout=20)
        await tool.run("import os\nos.makedirs('output', exist_ok=True)")
        assert "'armed'" in await tool.run(STOP_EVERY_NEW_PROCESS)
        frozen = await session.exec("sleep", "1", shell=False)
    assert frozen.exit_code == 124


@pytest.fixture
async def docker_box() -> AsyncIterator[Any]:
    from backends import require_backend

    require_backend("docker")
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=LIMITS))
    try:
        yield box
    finally:
        await box.close()


async def test_a_docker_helper_runs_as_a_uid_the_sandbox_does_not_have(docker_box: Any) -> None:
    from coderoom.sandboxes.docker.helpers import HELPER_USER

    helper = await docker_box.helper(["id", "-u"], cap=100, what="id")
    command = await docker_box.exec(["id", "-u"])
    assert helper.stdout.strip() != command.stdout.strip()
    assert int(helper.stdout) == int(HELPER_USER.split(":")[0])


async def test_the_kernel_ends_a_docker_helper_at_its_deadline(docker_box: Any) -> None:
    """The alarm is set before the helper starts, so nothing the helper or the sandbox does
    outlives it: SIGALRM, exit 128 + 14."""
    from coderoom.sandboxes.docker.container import PYTHON
    from coderoom.sandboxes.docker.helpers import REPLY_SLACK_S, run_helper, with_alarm

    started = time.monotonic()
    done = await run_helper(
        docker_box.client.api, docker_box.container_id, with_alarm(PYTHON, ["sleep", "60"], 1),
        cwd=docker_box.root, timeout=1, cap=100, what="sleep",
    )  # fmt: skip
    assert done.exit_code == 128 + signal.SIGALRM
    assert time.monotonic() - started < 1 + REPLY_SLACK_S


async def test_the_host_stops_waiting_for_a_docker_helper_at_its_deadline(docker_box: Any) -> None:
    from coderoom.sandboxes.docker.helpers import REPLY_SLACK_S, HelperTimeout, run_helper

    started = time.monotonic()
    with pytest.raises(HelperTimeout, match="sleep did not finish within its 1 s deadline"):
        await run_helper(
            docker_box.client.api, docker_box.container_id, ["sleep", "60"], cwd=docker_box.root,
            timeout=1, cap=100, what="sleep",
        )  # fmt: skip
    assert time.monotonic() - started < 2 + REPLY_SLACK_S
