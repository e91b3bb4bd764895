"""The local sandbox's Python is the host's: from a pyenv/system Python, from a venv (the README's
install), from Debian's /usr/bin/python3; and the sandbox starts wherever TMPDIR points.

Each case runs coderoom in a separate interpreter (the venv's), because which packages the
sandbox sees is decided by the interpreter coderoom itself runs in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from backends import require_backend

# Runs in the venv's interpreter: one local session, the same probe through `python3`, `python`
# and `python3 -I` (how the run_python kernel starts), printed as JSON lines.
HARNESS = r"""
import asyncio, sys
from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session

PROBE = '''
import json, sys, site
mods = {}
for name in sys.argv[1].split(","):
    try:
        mods[name] = getattr(__import__(name), "__file__", "?")
    except ImportError as exc:
        mods[name] = "MISSING: " + str(exc)
print(json.dumps({"prefix": sys.prefix, "base": sys.base_prefix, "path": sys.path, "mods": mods}))
'''

async def main() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        for python in ("python3", "python", "python3 -I"):
            result = await session.exec(f"{python} -c '{PROBE}' {sys.argv[1]}")
            sys.stdout.write(result.stdout.decode() or "ERROR " + result.stderr.decode()[-2000:] + "\n")

asyncio.run(main())
"""


def run_in(python: Path, modules: list[str], env: dict[str, str] | None = None) -> list[dict]:
    done = subprocess.run(
        [str(python), "-c", HARNESS, ",".join(modules)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and not any(line.startswith("ERROR") for line in lines), done.stdout
    return [json.loads(line) for line in lines]


def make_venv(base_python: str, where: Path, extra_path: list[str]) -> Path:
    """A venv seeing the base's packages, plus a module only it has."""
    venv = [base_python, "-m", "venv", "--system-site-packages", "--without-pip", str(where)]
    subprocess.run(venv, check=True)
    site = next(where.glob("lib/python3*/site-packages"))
    (site / "venv_only_probe.py").write_text("VALUE = 'from the venv'\n")
    if extra_path:  # for an interpreter that does not have coderoom's dependencies itself
        (site / "coderoom_deps.pth").write_text("".join(f"{p}\n" for p in extra_path))
    return where / "bin" / "python"


def venv_of_this_python(where: Path) -> Path:
    """A venv made from the interpreter running the tests. When that is itself a venv (pytest
    run from the README's install), the new venv's base is the base interpreter, which lacks
    coderoom's dependencies: they come from this venv's site-packages by .pth."""
    in_venv = sys.prefix != sys.base_prefix
    extra = [p for p in sys.path if p.endswith("site-packages")] if in_venv else []
    return make_venv(sys.executable, where, extra)


def test_venv_packages_reach_the_sandbox(tmp_path: Path) -> None:
    """The README's install: coderoom in a venv, numpy/pandas/matplotlib in its site-packages."""
    require_backend("local")
    venv = tmp_path / "project" / ".venv"
    runs = run_in(venv_of_this_python(venv), ["pandas", "matplotlib", "venv_only_probe"])
    for run in runs:
        assert not any(m.startswith("MISSING") for m in run["mods"].values()), run["mods"]
        assert run["prefix"] == "/opt/coderoom/venv" and run["base"] == "/opt/coderoom/python"
        assert run["mods"]["venv_only_probe"].startswith("/opt/coderoom/venv/lib/")
        # nothing of the host's folders is on the path: only the neutral mount points
        assert all(p.startswith("/opt/coderoom/") for p in run["path"] if p), run["path"]


def test_the_host_venv_folder_is_not_exposed(tmp_path: Path) -> None:
    """Only the venv's site-packages is bound: not its bin/ (activate scripts), not the project."""
    require_backend("local")
    project = tmp_path / "project"
    python = venv_of_this_python(project / ".venv")
    (project / "secret.txt").write_text("project file")
    script = (
        "import asyncio\nfrom coderoom.sandboxes import SandboxSpec\nfrom coderoom.sandboxes.session import open_session\n"
        "async def main():\n"
        "    async with open_session(SandboxSpec(backend='local')) as s:\n"
        "        r = await s.exec('ls /opt/coderoom/venv /opt/coderoom/venv/bin; "
        f"cat {project}/secret.txt; true')\n"
        "        print(r.stdout.decode())\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    listing = done.stdout.split()
    assert "pyvenv.cfg" in listing and "python3" in listing
    assert "activate" not in listing and "project file" not in done.stdout


def test_debian_system_python_venv(tmp_path: Path) -> None:
    """Debian's /usr/bin/python3: base at /usr, packages in /usr/lib/python3/dist-packages."""
    require_backend("local")
    system = "/usr/bin/python3"
    if not os.access(system, os.X_OK):
        pytest.skip("no /usr/bin/python3 here")
    version = subprocess.run([system, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()  # fmt: skip
    if version != str(sys.version_info[:2]):
        pytest.skip(f"/usr/bin/python3 is {version}; the test borrows this interpreter's packages")
    probe = subprocess.run([system, "-m", "venv", "--help"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("/usr/bin/python3 has no venv module (Debian: python3-venv)")
    # coderoom and its dependencies come from this interpreter's site-packages, by .pth
    deps = [p for p in sys.path if p.endswith("site-packages")] + [str(Path(__file__).parents[2] / "src")]
    python = make_venv(system, tmp_path / "debvenv", deps)
    runs = run_in(python, ["venv_only_probe", "json"])
    for run in runs:
        assert run["mods"]["venv_only_probe"].startswith("/opt/coderoom/venv/lib/"), run["mods"]
        assert run["mods"]["json"].startswith("/opt/coderoom/python/lib/python3."), run["mods"]
        if Path("/usr/lib/python3/dist-packages").is_dir():  # Debian's own layout, under the base
            assert "/opt/coderoom/python/lib/python3/dist-packages" in run["path"], run["path"]


def test_root_with_a_private_tmpdir(tmp_path: Path) -> None:
    """As root, bwrap runs as uid 65534: a TMPDIR inside a 0700 root folder must not break it."""
    require_backend("local")
    if os.geteuid() != 0:
        pytest.skip("only root hands bwrap to another uid")
    private = Path("/tmp") / f"coderoom-private-{uuid.uuid4().hex[:8]}"
    private.mkdir(mode=0o700)
    try:
        tmpdir = private / "tmp"
        tmpdir.mkdir()
        env = {**os.environ, "TMPDIR": str(tmpdir)}
        script = (
            "import asyncio\nfrom coderoom.sandboxes import SandboxSpec\nfrom coderoom.sandboxes.session import open_session\n"
            "async def main():\n"
            "    async with open_session(SandboxSpec(backend='local')) as s:\n"
            "        r = await s.exec('echo hi > f && cat f && python3 -c \"import pandas; print(2)\"')\n"
            "        print(r.exit_code, r.stdout.decode().split(), r.stderr.decode()[-500:])\n"
            "        print(s._inner.host_dir)\n"
            "asyncio.run(main())\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result, host_dir = done.stdout.splitlines()
        assert result.startswith("0 ['hi', '2']"), result
        assert not Path(host_dir).is_relative_to(private)  # made where uid 65534 can reach
        assert not Path(host_dir).exists()  # and deleted on close
    finally:
        shutil.rmtree(private)


async def test_the_sandbox_etc_and_venv_are_read_only_files_of_its_own_root_not_of_the_session_folder() -> None:
    """bwrap writes /etc, the launcher's files and (when the host's Python is a venv) the venv's
    pyvenv.cfg and links into the sandbox's own root, which is read-only once set up; the session
    folder holds the workspace and the host's records only (as files there they were 13 host-disk
    entries of every start, issue 25)."""
    require_backend("local")
    from coderoom.sandboxes import SandboxSpec
    from coderoom.sandboxes.local import bwrap
    from coderoom.sandboxes.session import open_session

    venv = bool(bwrap.runtime().venv_sites)  # the venv skeleton is made only then
    files = ["/etc/passwd", "/etc/hosts", *([f"{bwrap.VENV_MOUNT}/pyvenv.cfg"] if venv else [])]
    files.append(f"{bwrap.OWN_DIR}/launcher.pyc")
    dirs = ["/etc", bwrap.OWN_DIR, *([bwrap.VENV_MOUNT] if venv else [])]
    script = (
        f"grep -c sandbox /etc/passwd; cat /etc/hostname; for f in {' '.join(files)}; do ls $f; done; "
        "python3 -c 'import sys; print(sys.prefix)'; "
        f"for f in {' '.join(files)}; do echo x >> $f || echo refused; done; "
        f"for d in {' '.join(dirs)}; do mkdir $d/new 2>&1 | grep -c 'Read-only file system'; done"
    )
    async with open_session(SandboxSpec(backend="local")) as session:
        folder = session._inner.host_dir
        records = {"workspace", "lease", "session", "cgroup", "bwrap"}
        assert {p.name for p in folder.iterdir()} <= records | {f"python-{index}" for index in range(4)}
        done = await session.exec(script)
    lines = done.stdout.decode().split()
    prefix = bwrap.VENV_MOUNT if venv else bwrap.RUNTIME_MOUNT
    assert lines[: 3 + len(files)] == ["1", "sandbox", *files, prefix], done.stderr
    assert lines[3 + len(files) :] == ["refused"] * len(files) + ["1"] * len(dirs), (done.stdout, done.stderr)
