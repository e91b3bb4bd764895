"""Host helpers sandbox code cannot freeze (issue 19), written as the attack: a run_python cell
starts a thread that SIGSTOPs every process that appears after it (and ptraces it, where it
can). The output check behind the nudge, reading an output back and archiving the workspace
still finish, within a bound, on every backend.

Docker: those helpers run as a uid no sandbox process has (`docker/helpers.py`), and the archive
kills every sandbox process first. Local: every command, a helper too, has a PID namespace of its
own, so the kernel sees none of them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coderoom.artifacts import check_in_session
from coderoom.jobs import OutputSpec
from coderoom.sandboxes import Limits, SandboxSpec
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
