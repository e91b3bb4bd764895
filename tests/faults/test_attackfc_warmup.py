"""Attack pass F-C: a live session opened without the pool warms its kernel up (numpy, pandas,
matplotlib.pyplot, one step each) while the session is built and its files are copied in.
The warm-up imports the sandbox's packages only: it never runs a workspace module, and
cells are numbered, answered and cancelled as in a kernel that was not warmed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coderoom import Session
from coderoom.service import SessionManager
from coderoom.service import session as session_module
from coderoom.service.sandbox import warm_imports
from coderoom.tools import python_kernel

pytestmark = pytest.mark.usefixtures("tmpdir_for_sessions")

# optional dependencies pandas looks up when it is imported (installed in no sandbox here), so
# a workspace module of that name is found through the workspace's place on sys.path
PLANTED = ("bottleneck", "numexpr")
CANARY = "FC-CANARY-7f3 a workspace module ran"
PLANT = (f"__version__ = '99.0'\nprint({CANARY!r})\nopen(__name__ + '.ran', 'w').write('1')\n").encode()


async def test_the_warm_up_runs_no_workspace_module(tmp_path: Path) -> None:
    """F-C1: a workspace file named like an optional dependency of pandas (bottleneck.py) was
    imported by the warm-up's `import pandas`, before any cell: its code ran unasked, its output
    went nowhere, and the user's own `import bottleneck` later printed nothing. Now the warm-up
    imports with the workspace off sys.path; the user's cells still import workspace modules."""
    files = {f"{name}.py": PLANT for name in PLANTED}
    session = await Session.open(model="offline", runs_dir=tmp_path, files=files)
    try:
        assert await session._warming is True  # every step was done
        ran = await session.run_python(
            "import os, sys\n[n for n in " + repr(PLANTED) + " if n in sys.modules or os.path.exists(n + '.ran')]"
        )
        assert ran.status == "ok" and "[Out 1]\n[]" in ran.text
        asked = await session.run_python("import bottleneck")
        assert asked.status == "ok" and CANARY in asked.text  # the user's import runs it, once, shown
    finally:
        await session.close()


async def test_the_warm_up_leaves_the_garbage_collector_as_it_was_and_binds_no_name(tmp_path: Path) -> None:
    """The warm-up pauses the cyclic collector while it imports (`warm_imports`): after it, the
    collector runs as in a kernel that was not warmed, and a step run where a cell had turned it
    off (a step's code, asked as a cell here) leaves it off; none of the step's names is left."""
    session = await Session.open(model="offline", runs_dir=tmp_path)
    try:
        assert await session._warming is True
        seen = "import gc\n(gc.isenabled(), [n for n in ('_g', '_o', '_s', '_p', '_m', '_e') if n in globals()])"
        warmed = await session.run_python(seen)
        assert warmed.status == "ok" and "[Out 1]\n(True, [])" in warmed.text, warmed.text
        off = await session.run_python("gc.disable()\n" + warm_imports(("json",)) + seen.split("\n")[1])
        assert off.status == "ok" and "[Out 2]\n(False, [])" in off.text, off.text
    finally:
        await session.close()


def test_the_warm_up_imports_with_the_collector_paused_and_restores_it_when_an_import_fails(tmp_path: Path) -> None:
    """What the pause is for, seen from a module the warm-up imports: the collector is off while
    it is imported. An import that fails (the warm-up's cell then fails) still leaves the
    collector on and sys.path whole. One fresh interpreter, as the kernel's worker is."""
    packages, workspace = tmp_path / "packages", tmp_path / "workspace"
    packages.mkdir()
    workspace.mkdir()
    (packages / "gc_seen.py").write_text("import gc\nSEEN = gc.isenabled()\n")
    code = f"import gc, sys\nsys.path.append({str(packages)!r})\npath = sys.path[:]\n" + textwrap.dedent("""
        try:
            exec(WARM)
        except ImportError as failed:
            print(failed.name)
        print(sys.modules['gc_seen'].SEEN, gc.isenabled(), sys.path == path)
    """)
    warm = warm_imports(("gc_seen", "no_such_module_for_the_warm_up"))
    done = subprocess.run([sys.executable, "-I", "-c", f"WARM = {warm!r}\n" + code], cwd=workspace,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["no_such_module_for_the_warm_up", "False", "True", "True"]


def _kernels() -> set[int]:
    """Running processes with the kernel's clean-environment mark (this machine's, any test's:
    the checks below compare with the ones seen while this test's kernel ran)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if b"CODEROOM_KERNEL=1" in environ.split(b"\0"):
            found.add(int(entry))
    return found


@pytest.mark.parametrize("after_s", [0.0, 0.4])
async def test_an_open_cancelled_during_a_warm_up_import_leaves_no_kernel_and_no_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after_s: float
) -> None:
    """F-C2: the open is cancelled (a client gone) while the warm-up's import runs and a file is
    still being copied in: the open ends cancelled, the warm-up with it, and neither a task on
    the loop nor a kernel process in the sandbox is left behind."""
    before = _kernels()
    copying = asyncio.Event()
    write = session_module.Session._write

    async def slow_write(self: session_module.Session, path: str, data: bytes | Path) -> str:
        await copying.wait()  # a large file: the copy outlasts the kernel's start
        return await write(self, path, data)

    monkeypatch.setattr(session_module.Session, "_write", slow_write)
    opening = asyncio.ensure_future(Session.open(model="offline", runs_dir=tmp_path, files={"big.bin": b"x"}))
    async with asyncio.timeout(60):
        while not any(s.started and s.warming for s in list(python_kernel._STATES.values())):
            await asyncio.sleep(0.005)
    during = _kernels() - before
    assert during  # the kernel runs (the check below sees kernels)
    await asyncio.sleep(after_s)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    assert not (_kernels() & during)


@pytest.mark.parametrize("after_s", [0.0, 0.5])
async def test_a_close_during_the_warm_up_ends_it_with_the_sandbox(tmp_path: Path, after_s: float) -> None:
    """F-C3: the session is closed (its client, the idle reaper) while the warm-up's imports
    run: the close does not wait for them, and no task or kernel is left running after it."""
    before = _kernels()
    session = await Session.open(model="offline", runs_dir=tmp_path)
    state = python_kernel.KernelClient(session._live.session).state
    async with asyncio.timeout(60):
        while not (state.started and state.warming):
            await asyncio.sleep(0.005)
    during = _kernels() - before
    assert during
    await asyncio.sleep(after_s)
    async with asyncio.timeout(30):
        run_dir = await session.close()
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    assert not (_kernels() & during)
    assert (run_dir / "run.jsonl").is_file()


async def test_site_reads_nothing_a_cell_or_the_workspace_can_plant(tmp_path: Path) -> None:
    """F-C4: the kernel now starts with `site` (the first, -S, process only cleans the
    environment). A sitecustomize.py, usercustomize.py or .pth file in the workspace is not
    read by a fresh kernel's start, and no folder `site` reads (site-packages, the
    interpreter's folder and its parent where a pyvenv.cfg would be) is writable by a cell."""
    plant = f"print({CANARY!r})\nopen('/tmp/fc-site-ran', 'w').write('1')\n".encode()
    files = {"sitecustomize.py": plant, "usercustomize.py": plant, "fc.pth": b"import sitecustomize\n"}
    session = await Session.open(model="offline", runs_dir=tmp_path, files=files)
    try:
        await session._warming
        kernel = python_kernel.KernelClient(session._live.session).state
        before = kernel.channel
        assert before is not None and (await session.run_python("1")).status == "ok"
        # the supervisor killed (the process that ran `site`): the host sees the kernel go away
        # and the next cell starts a new one. Not told apart by the supervisor's pid or start
        # time: every command's namespace numbers it alike, and its process is forked when the
        # command's slot is prepared, so two kernels' slots can be made in the same clock tick.
        killed = await session.run_python("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n")
        assert killed.status == "crashed" and "STATE LOST" in killed.text
        again = await session.run_python("1")
        assert again.status == "ok" and kernel.channel is not None and kernel.channel is not before
        fresh = await session.run_python(
            "import os, site, sys\n"
            "reads = site.getsitepackages() + [os.path.dirname(sys.executable), os.path.dirname(os.path.dirname(sys.executable))]\n"
            "mod = sys.modules.get('sitecustomize')\n"
            "(os.path.exists('/tmp/fc-site-ran'), getattr(mod, '__file__', '').startswith(os.getcwd()),"
            " 'usercustomize' in sys.modules, [d for d in reads if os.access(d, os.W_OK)])"
        )
        assert fresh.status == "ok" and "(False, False, False, [])" in fresh.text
        assert CANARY not in fresh.text
    finally:
        await session.close()


async def test_a_server_s_open_cancelled_mid_warm_up_frees_its_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """F-C6: the MCP server and the web page open sessions through SessionManager.open; one
    cancelled during the warm-up (a client's cancel, a dropped connection) leaves no session,
    no kernel, and its place under max_sessions free for the next open."""
    before = _kernels()
    copying = asyncio.Event()
    write = session_module.Session._write

    async def slow_write(self: session_module.Session, path: str, data: bytes | Path) -> str:
        await copying.wait()
        return await write(self, path, data)

    monkeypatch.setattr(session_module.Session, "_write", slow_write)
    async with SessionManager(max_sessions=1, model="offline", runs_dir=tmp_path) as manager:
        opening = asyncio.ensure_future(manager.open(files={"big.bin": b"x"}))
        async with asyncio.timeout(60):
            while not any(s.started and s.warming for s in list(python_kernel._STATES.values())):
                await asyncio.sleep(0.005)
        during = _kernels() - before
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        assert manager.live == [] and not (_kernels() & during)
        copying.set()
        second = await manager.open()  # the one place is free again
        assert [s.id for s in manager.live] == [second.id]


async def test_a_site_package_that_sets_a_variable_does_not_keep_the_kernel_from_starting(tmp_path: Path) -> None:
    """F-C9: an interpreter whose site-packages holds a .pth file (or sitecustomize) that sets
    an environment variable, as an installed package may: each start compared the environment
    after `site` with the clean one, found the package's variable and exec'd again, for ever (a
    core spun in the sandbox, run_python never answered). The check reads the environment the
    process was started with (/proc/self/environ), which no .pth changes; the kernel starts,
    keeps the package's variable, and still holds no host variable."""
    from coderoom.tools.inside import kernel_server
    from coderoom.tools.python_kernel import kernel_source

    session = await Session.open(model="offline", runs_dir=tmp_path)
    try:
        await session._warming
        await session.write_file(".fc/boot", kernel_server.BOOT.encode())
        await session.write_file(".fc/source", kernel_source().encode())
        await session.write_file(
            ".fc/probe", b"import os, sys\nprint(os.environ.get('FC_PTH_VAR'), sys.flags.no_site, 'FC_HOST' in open('/proc/self/environ').read())\n"
        )
        made = await session.exec(
            "python3 -m venv --without-pip .fc/venv && "
            "echo \"import os; os.environ.setdefault('FC_PTH_VAR', 'fc-canary-pth')\" > "
            "\"$(.fc/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')/fcenv.pth\""
        )
        assert made.exit_code == 0, made.stderr
        # BOOT with a probe for SOURCE: the environment the probe runs in, after one exec
        probe = await session.exec(
            "FC_HOST=fc-canary-host timeout 10 .fc/venv/bin/python -I -S -c \"$(cat .fc/boot)\" \"$(cat .fc/probe)\"; echo rc=$?"
        )
        assert probe.stdout.split() == ["fc-canary-pth", "0", "False", "rc=0"], probe
        # the kernel itself: it reaches `serve` (ready), then ends as its channel is closed
        kernel = await session.exec(
            "FC_HOST=fc-canary-host timeout 10 .fc/venv/bin/python -I -S -c \"$(cat .fc/boot)\" "
            "\"$(cat .fc/source)\" serve channel < /dev/null; echo rc=$?"
        )
        assert '"ready": true' in kernel.stdout and kernel.stdout.split()[-1] == "rc=0", kernel
    finally:
        await session.close()
