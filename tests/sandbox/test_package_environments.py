"""Declared package environments on the local backend: a job that declares a package imports it
in a real sandbox, the build happens once per content (also when several processes ask at
once), a package that cannot be installed is exit 2 before any run folder, the named limits
hold, and the sandbox can read the environment but never change it.

Offline only: the packages are tiny wheels made here (`support.wheels`) in a folder given as
`find_links`, which makes pip use no index at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agents.testing import ScriptedModel, assistant_message, function_call
from backends import require_backend
from support.wheels import make_sdist, make_wheel

from coderoom.errors import EnvironmentBuildError
from coderoom.jobs import load_job
from coderoom.models import ResolvedModel
from coderoom.record import read_record
from coderoom.run import run_job
from coderoom.sandboxes.local import packages
from coderoom.sandboxes.spec import EnvironmentSpec, SandboxSpec

PROBE = "import crtiny, numpy; print(crtiny.VALUE, crtiny.__file__)"


@pytest.fixture(autouse=True)
def local_backend() -> None:
    require_backend("local")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(packages.CACHE_VARIABLE, str(folder))
    return folder


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    make_wheel(folder, "crtiny", "1.2.3", "VALUE = 42\n")
    return folder


def job_folder(tmp_path: Path, environment: str) -> Path:
    """A job folder whose coderoom.toml declares `environment` (paths in it relative to the folder)."""
    folder = tmp_path / "job"
    folder.mkdir(exist_ok=True)
    (folder / "coderoom.toml").write_text(
        'prompt = "use crtiny"\noutputs = ["output/v.txt"]\n'
        f'[sandbox]\nbackend = "local"\n[sandbox.environment]\n{environment}\n'
    )
    return folder


def scripted(*steps: list) -> ResolvedModel:
    return ResolvedModel(model=ScriptedModel(steps), label="scripted", api="offline",
                         accepts_images=False, tracing_disabled=True)  # fmt: skip


async def test_a_job_declaring_a_package_imports_it_in_the_sandbox_and_records_its_version(
    tmp_path: Path, cache: Path, wheels: Path
) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "requirements.txt").write_text("# from a file, beside the job\ncrtiny == 1.2.3\n")
    job = load_job(job_folder(tmp_path, 'requirements = "requirements.txt"\nfind_links = ["../wheels"]'))
    assert job.sandbox.environment.packages == ["crtiny==1.2.3"]
    # `python3 -I` is how the run_python kernel starts: PYTHONPATH would not reach it
    command = f"mkdir -p output && python3 -c '{PROBE}' > output/v.txt && python3 -I -c '{PROBE}' >> output/v.txt"
    model = scripted([function_call("exec_command", {"cmd": command}, call_id="c1")], [assistant_message("done")])
    result = await run_job(job, run_dir=tmp_path / "run", model=model)
    assert result.ok, result.error
    lines = (tmp_path / "run/output/v.txt").read_text().splitlines()
    assert len(lines) == 2 and all(line.startswith("42 /opt/coderoom/venv/") for line in lines)
    start = read_record(tmp_path / "run").events[0]
    assert start.type == "run_start" and start.environment is not None
    assert start.environment["declared"] == ["crtiny==1.2.3"]
    assert start.environment["installed"] == [{"name": "crtiny", "version": "1.2.3"}]


def test_the_agent_is_told_which_packages_were_declared(tmp_path: Path, wheels: Path) -> None:
    from coderoom.agent import build_agent

    job = load_job(job_folder(tmp_path, f'packages = ["crtiny>=1"]\nfind_links = ["{wheels}"]'))
    agent = build_agent(job, scripted([assistant_message("done")]), lambda *args, **kwargs: None)
    assert "Also installed in the sandbox's Python, for this job: crtiny>=1." in str(agent.instructions)


def test_a_second_use_reuses_the_cached_environment(cache: Path, wheels: Path) -> None:
    env = EnvironmentSpec(packages=["crtiny"], find_links=[str(wheels)])
    said: list[str] = []
    first = packages.ensure(env, said.append)
    assert first is not None and len(said) == 1
    log = first.folder / packages.LOG_FILE
    built = (log.stat().st_mtime_ns, log.stat().st_ino, (first.folder / packages.RECORD_FILE).read_text())
    second = packages.ensure(env, said.append)
    assert second == first and len(said) == 1  # no second "building" line
    assert (log.stat().st_mtime_ns, log.stat().st_ino, (first.folder / packages.RECORD_FILE).read_text()) == built
    assert "Successfully installed crtiny-1.2.3" in log.read_text()


def test_a_new_wheel_in_the_folder_is_a_new_environment(cache: Path, wheels: Path) -> None:
    env = EnvironmentSpec(packages=["crtiny"], find_links=[str(wheels)])
    before = packages.environment_key(env)
    make_wheel(wheels, "crtiny", "1.2.4", "VALUE = 43\n")
    assert packages.environment_key(env) != before


def test_concurrent_builds_of_one_environment_build_once(tmp_path: Path, cache: Path, wheels: Path) -> None:
    program = (
        "import sys; from coderoom.sandboxes.local import packages; from coderoom.sandboxes.spec import EnvironmentSpec\n"
        "said = []\n"
        f"built = packages.ensure(EnvironmentSpec(packages=['crtiny'], find_links=[{str(wheels)!r}]), said.append)\n"
        "print('built' if said else 'reused', built.key)\n"
    )
    runs = [subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    outcomes = [run.communicate(timeout=600)[0].split() for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert sorted(word for word, _ in outcomes) == ["built", "reused", "reused"]
    assert len({key for _, key in outcomes}) == 1
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == [outcomes[0][1]]


def test_a_package_that_cannot_be_installed_is_exit_2_naming_it_before_any_run_folder(
    tmp_path: Path, cache: Path, wheels: Path
) -> None:
    folder = job_folder(tmp_path, f'packages = ["crtiny", "no-such-package==9"]\nfind_links = ["{wheels}"]')
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "coderoom", "run", str(folder), "--model", "offline", "--out", str(run_dir)],
        capture_output=True, text=True, timeout=600, env={**os.environ, packages.CACHE_VARIABLE: str(cache)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    message = [line for line in done.stderr.splitlines() if line.startswith("coderoom: error:")]
    assert len(message) == 1 and "'no-such-package==9'" in message[0] and "failed.log" in message[0], done.stderr
    assert not run_dir.exists()
    log = Path(message[0].rsplit("pip's output: ", 1)[1].rstrip(")"))
    assert "no-such-package" in log.read_text()
    assert sorted(p.suffix for p in cache.iterdir()) == [".lock", ".log"]  # no environment, whole or half


def test_a_malformed_package_is_exit_2_naming_the_key_and_the_package(tmp_path: Path, cache: Path) -> None:
    folder = job_folder(tmp_path, 'packages = ["numpy; import os"]')
    done = subprocess.run(
        [sys.executable, "-m", "coderoom", "run", str(folder), "--model", "offline", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert "sandbox.environment.packages" in done.stderr and "'numpy; import os'" in done.stderr
    assert not (tmp_path / "run").exists()
    done = subprocess.run(
        [sys.executable, "-m", "coderoom", "sandbox", "run", "--package", "--index-url=http://x", "--", "true"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "--package" in done.stderr


def test_the_size_cap_and_the_build_timeout_are_named_and_leave_nothing(cache: Path, wheels: Path) -> None:
    with pytest.raises(EnvironmentBuildError, match="max_size of 1K"):
        packages.ensure(EnvironmentSpec(packages=["crtiny"], find_links=[str(wheels)], max_size="1K"))
    with pytest.raises(EnvironmentBuildError, match="build_timeout of 0.01 s"):
        packages.ensure(EnvironmentSpec(packages=["crtiny"], find_links=[str(wheels)], build_timeout=0.01))
    assert all(p.suffix in (".lock", ".log") for p in cache.iterdir())


async def test_the_environment_is_read_only_inside_the_sandbox(cache: Path, wheels: Path) -> None:
    from coderoom.sandboxes.registry import get_backend, prepare_backend

    spec = SandboxSpec(backend="local", environment={"packages": ["crtiny"], "find_links": [str(wheels)]})
    prepare_backend(spec, lambda line: None)
    built = packages.ensure(spec.environment)
    assert built is not None
    module = built.site / "crtiny" / "__init__.py"
    sandbox = await get_backend("local").start(spec)
    try:
        tries = [
            "echo 'VALUE = 0' > \"$(python3 -c 'import crtiny; print(crtiny.__file__)')\"",
            "touch \"$(python3 -c 'import crtiny, os; print(os.path.dirname(crtiny.__path__[0]))')\"/evil.pth",
            "rm -rf \"$(python3 -c 'import crtiny; print(crtiny.__path__[0])')\"",
            "python3 -c 'import crtiny; print(crtiny.VALUE)'",
        ]
        results = [await sandbox.exec(["sh", "-c", command]) for command in tries]
    finally:
        await sandbox.close()
    assert [r.exit_code != 0 for r in results] == [True, True, True, False]
    assert all(b"Read-only file system" in r.stderr for r in results[:3])
    assert results[3].stdout == b"42\n"
    assert module.read_text() == "VALUE = 42\n" and not (built.site / "evil.pth").exists()


def test_the_record_of_a_built_environment_names_no_host_path_inside_the_sandbox(cache: Path, wheels: Path) -> None:
    built = packages.ensure(EnvironmentSpec(packages=["crtiny"], find_links=[str(wheels)]))
    assert built is not None
    visible = b"".join(p.read_bytes() for p in built.site.rglob("*") if p.is_file())
    assert str(cache).encode() not in visible and str(wheels).encode() not in visible
    assert json.loads((built.folder / packages.RECORD_FILE).read_text())["installed"] == [["crtiny", "1.2.3"]]


HARNESS = r"""
import asyncio, sys
from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session

async def main():
    spec = SandboxSpec(backend="local", environment={"packages": ["crtiny"], "find_links": [sys.argv[1]]})
    async with open_session(spec) as session:
        for python in ("python3", "python3 -I"):
            done = await session.exec(f"{python} -c 'import crtiny, numpy, sys; print(crtiny.VALUE, sys.prefix)'")
            print(done.stdout.decode().strip() or done.stderr.decode()[-1500:])
asyncio.run(main())
"""


def test_a_host_python_that_is_no_venv_gets_the_environment_too(tmp_path: Path, cache: Path, wheels: Path) -> None:
    """From a base interpreter (CI installs coderoom into one), the sandbox gets a venv skeleton
    of its own for the environment, with the base's packages (numpy) still importable."""
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    probe = subprocess.run([str(base), "-c", "import pydantic, agents, numpy"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"{base} lacks coderoom's dependencies")
    source = str(Path(__file__).parents[2] / "src")
    environ = {**os.environ, "PYTHONPATH": source, packages.CACHE_VARIABLE: str(cache)}
    done = subprocess.run([str(base), "-c", HARNESS, str(wheels)], capture_output=True, text=True, timeout=600, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["42 /opt/coderoom/venv", "42 /opt/coderoom/venv"], done.stdout


def test_an_incomplete_environment_in_the_cache_is_built_again(cache: Path, wheels: Path) -> None:
    """A folder without its record (copied by hand, cut short) is never used: it is replaced."""
    env = EnvironmentSpec(packages=["crtiny"], find_links=[str(wheels)])
    leftover = cache / packages.environment_key(env)
    (leftover / "venv").mkdir(parents=True)
    built = packages.ensure(env)
    assert built is not None and built.folder == leftover and (built.site / "crtiny" / "__init__.py").is_file()


def test_a_package_with_only_an_sdist_is_refused_before_its_code_runs_on_the_host(
    tmp_path: Path, cache: Path, wheels: Path
) -> None:
    """security.md P13: pip builds an sdist by running its code (setup.py, a build backend) on
    the host; the local backend installs wheels only, so such a package is exit 2, named."""
    canary = tmp_path / "CANARY-built"
    make_sdist(wheels, "crsource", "1.0", canary)
    folder = job_folder(tmp_path, f'packages = ["crtiny", "crsource"]\nfind_links = ["{wheels}"]')
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "coderoom", "run", str(folder), "--model", "offline", "--out", str(run_dir)],
        capture_output=True, text=True, timeout=600, env={**os.environ, packages.CACHE_VARIABLE: str(cache)},
    )  # fmt: skip
    assert not canary.exists(), "the sdist's code ran on the host"
    assert done.returncode == 2 and not run_dir.exists(), done.stderr
    message = [line for line in done.stderr.splitlines() if line.startswith("coderoom: error:")]
    assert len(message) == 1, done.stderr
    assert "no wheel of 'crsource'" in message[0] and "setup.py would run here" in message[0], done.stderr
