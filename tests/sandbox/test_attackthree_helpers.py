"""Third pass (attackthree, 2026-12-02): Docker host helpers against a hostile cell, written as
the attack. A run_python cell arms a thread that SIGSTOPs every new process (as in
test_host_helpers.py) and then makes its output readable by its own uid only (mode 0600), or
fills the container's pids limit. The host helpers read as "others", so a 0600 file sends the
read back to sandbox-uid commands, which the cell freezes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coderoom.artifacts import check_in_session
from coderoom.errors import SandboxFailed
from coderoom.jobs import OutputSpec
from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session
from coderoom.service.session import Session
from coderoom.tools.python_kernel import RunPythonTool

from sandbox.test_host_helpers import STOP_EVERY_NEW_PROCESS

LIMITS = Limits(timeout=20)
BOUND_S = 15.0  # test_host_helpers' bound: well under a frozen command's wall clock

LOCK_OUTPUT = "import os\nos.chmod('output/r.md', 0o600)\n'locked'"

FILL_PIDS = """
import os, threading, time
def refill():  # fork until the pids limit refuses, then take again any pid that is freed
    while True:
        try:
            if os.fork() == 0:
                time.sleep(3600); os._exit(0)
        except OSError:
            time.sleep(0.001)
threading.Thread(target=refill, daemon=True).start()
time.sleep(3)
try:
    os.fork() or os._exit(0)
    state = 'room left'
except OSError as exc:
    state = f'filled: {exc.strerror}'
state
"""


def _docker() -> None:
    from backends import require_backend

    require_backend("docker")


async def test_a_locked_output_and_a_stopping_cell_cannot_hold_the_check_or_the_read() -> None:
    _docker()
    async with open_session(SandboxSpec(backend="docker", limits=LIMITS)) as session:
        tool = RunPythonTool(session, images=False, timeout=20)
        await tool.run("import os\nos.makedirs('output', exist_ok=True)\nopen('output/r.md', 'w').write('# report')")
        assert "'locked'" in await tool.run(LOCK_OUTPUT)
        assert "'armed'" in await tool.run(STOP_EVERY_NEW_PROCESS)
        started = time.monotonic()
        checks = await check_in_session(session, [OutputSpec(path="output/r.md")])
        checked = time.monotonic() - started
        started = time.monotonic()
        try:
            read: bytes | str = await session.read_bounded(Path("output/r.md"), max_bytes=100)
        except Exception as exc:  # noqa: BLE001 - a named error is fine, a long wait is not
            read = type(exc).__name__
        took = time.monotonic() - started
    print(f"check {checked:.1f} s {checks}; read {took:.1f} s {read!r}")
    assert checked < BOUND_S, f"the output check took {checked:.1f} s"
    assert took < BOUND_S, f"the read took {took:.1f} s"
    assert checks[0].detail.startswith("unreadable"), checks  # it exists: not "missing"
    assert read == "ExecTimeoutError", f"a frozen read is a timeout, not {read!r}"


async def test_a_session_read_the_cell_froze_is_named_a_timeout(tmp_path: Path) -> None:
    """What the page and MCP's read_file say of the same read: a timeout, not "no such file"."""
    _docker()
    session = await Session.open(model="offline", sandbox="docker", limits=LIMITS, runs_dir=tmp_path, name="a3-d2")
    try:
        await session.exec("mkdir -p output && echo '# report' > output/r.md && chmod 600 output/r.md")
        assert "'armed'" in (await session.run_python(STOP_EVERY_NEW_PROCESS)).text
        started = time.monotonic()
        with pytest.raises(SandboxFailed, match="did not finish within"):
            await session.read_file("output/r.md")
        assert time.monotonic() - started < BOUND_S
    finally:
        await session.close()


async def test_a_locked_output_and_a_stopping_cell_cannot_hold_the_local_check_or_read() -> None:
    """Held on local: every command has a PID namespace of its own."""
    from backends import require_backend

    require_backend("local")
    async with open_session(SandboxSpec(backend="local", limits=LIMITS)) as session:
        tool = RunPythonTool(session, images=False, timeout=20)
        await tool.run("import os\nos.makedirs('output', exist_ok=True)\nopen('output/r.md', 'w').write('# report')")
        assert "'locked'" in await tool.run(LOCK_OUTPUT)
        assert "'armed'" in await tool.run(STOP_EVERY_NEW_PROCESS)
        started = time.monotonic()
        checks = await check_in_session(session, [OutputSpec(path="output/r.md")])
        checked = time.monotonic() - started
        started = time.monotonic()
        try:
            read: bytes | str = await session.read_bounded(Path("output/r.md"), max_bytes=100)
        except Exception as exc:  # noqa: BLE001 - a named error is fine, a long wait is not
            read = type(exc).__name__
        took = time.monotonic() - started
    print(f"check {checked:.1f} s {checks}; read {took:.1f} s {read!r}")
    assert checked < BOUND_S, f"the output check took {checked:.1f} s"
    assert took < BOUND_S, f"the read took {took:.1f} s"


async def test_a_cell_holding_the_pids_limit_cannot_hold_the_check_the_read_or_the_archive(backend: str) -> None:
    """Held on docker: pids.max limits fork, not a docker exec joining the cgroup."""
    async with open_session(SandboxSpec(backend=backend, limits=LIMITS)) as session:
        tool = RunPythonTool(session, images=False, timeout=20)
        await tool.run("import os\nos.makedirs('output', exist_ok=True)\nopen('output/r.md', 'w').write('# report')")
        filled = await tool.run(FILL_PIDS)
        assert "filled" in filled, filled
        started = time.monotonic()
        checks = await check_in_session(session, [OutputSpec(path="output/r.md")])
        checked = time.monotonic() - started
        try:
            read: bytes | str = await session.read_bounded(Path("output/r.md"), max_bytes=100)
        except Exception as exc:  # noqa: BLE001
            read = f"{type(exc).__name__}: {exc}"
        took = time.monotonic() - checked - started
        archive = await session.persist_workspace()  # init.py kills every sandbox process first
        archived = time.monotonic() - started
    print(f"check {checked:.1f} s {checks}; read {took:.1f} s {read!r}; archive {archived:.1f} s")
    assert checked < BOUND_S and took < BOUND_S and archived < 2 * BOUND_S
    assert archive.read(1)
    assert checks[0].ok or checks[0].detail, checks  # checked, or a named reason
