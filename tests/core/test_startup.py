"""Commands that need no agent never import the Agents SDK: importing it costs about 2 s of CPU,
so `--help`, `show`, `export`, `sandbox run` and usage errors would all start that slowly. A
plain `sandbox run` imports neither typer, rich nor pydantic either (about 80 ms more here).

Each command runs in a fresh interpreter through the installed entry point (`cli.main`, read
from pyproject.toml) that reports, on exit, which of those modules it had imported (whatever the
exit path: normal, an exit code or an error).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from coderoom.jobs import build_job
from coderoom.record import Recorder

ENTRY_POINT = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]["coderoom"]
MODULE, FUNCTION = ENTRY_POINT.split(":")
HEAVY = ("agents", "typer", "rich", "pydantic", "h11")  # h11: the egress proxy, only with an allowlist

# Runs `coderoom` as its entry point does, then prints the heavy modules it imported on stderr.
WRAPPER = (
    "import atexit, sys\n"
    "heavy = sys.argv.pop(1).split(',')\n"
    "atexit.register(lambda: print('HEAVY-MODULES', sorted(m for m in sys.modules"
    " if m.split('.')[0] in heavy), file=sys.stderr))\n"
    f"from {MODULE} import {FUNCTION} as entry\n"
    "sys.argv[0] = 'coderoom'\n"
    "entry()\n"
)


def heavy_modules(*args: str, cwd: Path, heavy: tuple[str, ...] = HEAVY) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, ",".join(heavy), *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )
    reports = [line for line in done.stderr.splitlines() if line.startswith("HEAVY-MODULES ")]
    assert len(reports) == 1, done.stderr
    return done.returncode, json.loads(reports[0].removeprefix("HEAVY-MODULES ").replace("'", '"'))


def sdk_modules(*args: str, cwd: Path) -> tuple[int, list[str]]:
    code, modules = heavy_modules(*args, cwd=cwd)
    return code, [m for m in modules if m == "agents" or m.startswith("agents.")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small recorded run: one shell step, one Python cell, the end."""
    folder = tmp_path_factory.mktemp("run")
    job = build_job({"name": "startup", "prompt": "count", "outputs": ["output/n.txt"], "model": "offline"})
    recorder = Recorder(folder)
    recorder.emit("run_start", job=job.model_dump(mode="json"), model="scripted", coderoom_version="test")
    steps = [
        ("exec_command", {"cmd": "mkdir -p output && echo 3 > output/n.txt"},
         "Chunk ID: a\nWall time: 0.01 s\nProcess exited with code 0\nOutput:\n"),
        ("run_python", {"code": "1 + 2"}, "[cell 1: ok]\n3"),
    ]  # fmt: skip
    for number, (tool, arguments, output) in enumerate(steps):
        recorder.emit("tool_start", call_id=f"c{number}", name=tool, arguments=arguments)
        recorder.emit("tool_result", call_id=f"c{number}", name=tool, arguments=arguments, output=output,
                      duration_s=0.01)  # fmt: skip
    recorder.emit(
        "run_end", status="ok", final_output="3", error=None, outputs=[], usage={}, duration_s=0.1
    )
    recorder.close()
    return folder


@pytest.mark.parametrize(
    "args, exit_code",
    [
        (["--help"], 0),
        (["sandbox", "run", "--", "true"], 0),
        (["sandbox", "run", "--memory", "lots", "--", "true"], 2),  # a usage error
        (["run", "--no-such-flag"], 2),
        (["export", "/nonexistent-run"], 2),
        # a bad limit of a command that does run an agent: refused before the SDK loads
        (["run", "--model", "offline", "--limit", "memory=1", "hello"], 2),
        (["batch", ".", "--out", "out", "--limit", "memory=1"], 2),
        (["mcp", "--limit", "memory=1"], 2),
    ],
    ids=["help", "sandbox-run", "bad-limit", "bad-flag", "export-missing-run", "run-bad-limit", "batch-bad-limit", "mcp-bad-limit"],
)
def test_commands_that_need_no_agent_do_not_import_the_sdk(args: list[str], exit_code: int, tmp_path: Path) -> None:
    code, modules = sdk_modules(*args, cwd=tmp_path)
    assert code == exit_code
    assert modules == []


# What no command's help needs: the servers' starlette, anyio and mcp, asyncio, the sandbox spec's
# pydantic. A command module that imports one of them at the top (rather than in its body) puts it
# under every `coderoom --help`: mcp's presence and guard brought starlette and the spec's pydantic
# in and --help took twice as long.
SERVING = ("starlette", "anyio", "mcp", "asyncio", "h11", "docker", "requests")
# ... nor what typer's help renderer imports and never uses here (`cli.rich_help`): rich.markdown's
# markdown_it, rich.traceback's pygments (by rich.syntax)
RENDERER_UNUSED = ("markdown_it", "pygments")
HELP_HEAVY = ("agents", "pydantic", *SERVING, *RENDERER_UNUSED)


def test_help_imports_only_the_cli(tmp_path: Path) -> None:
    assert heavy_modules("--help", cwd=tmp_path, heavy=HELP_HEAVY) == (0, [])


@pytest.mark.parametrize("command", ["mcp", "serve", "batch", "run", "sandbox"])
def test_a_command_s_help_imports_none_of_what_it_runs(command: str, tmp_path: Path) -> None:
    """A command's own --help builds its options (typer converts them with pydantic) and no more."""
    assert heavy_modules(command, "--help", cwd=tmp_path, heavy=("agents", *SERVING, *RENDERER_UNUSED)) == (0, [])


def test_show_and_export_of_a_run_do_not_import_the_sdk(run_dir: Path, tmp_path: Path) -> None:
    for args in (
        ["show", str(run_dir)],
        ["export", str(run_dir), "--script", str(tmp_path / "replay.py"), "--notebook", str(tmp_path / "run.ipynb")],
    ):
        code, modules = sdk_modules(*args, cwd=tmp_path)
        assert (code, modules) == (0, []), args
    assert (tmp_path / "replay.py").is_file() and (tmp_path / "run.ipynb").is_file()


@pytest.mark.parametrize(
    "args, exit_code",
    [
        (["sandbox", "run", "--", "true"], 0),
        (["sandbox", "run", "--sandbox", "local", "--memory", "512M", "--timeout", "30", "--pids", "64",
          "--no-network", "--", "sh", "-c", "exit 7"], 7),
        (["sandbox", "run", "--timeout=1", "--", "sleep", "30"], 124),
        (["sandbox", "run", "--sandbox", "nope", "--", "true"], 2),  # reported in the same words
        (["sandbox", "run", "--memory", "1", "--", "true"], 2),  # the one limits parser has no pydantic
        (["sandbox", "run", "--limit", "workspace_size=8M", "--limit", "file_size=1M", "--", "true"], 0),
    ],
    ids=["true", "options", "timeout", "unknown-backend", "bad-limit", "limit-flags"],
)  # fmt: skip
def test_a_plain_sandbox_run_imports_no_typer_rich_or_pydantic(args: list[str], exit_code: int, tmp_path: Path) -> None:
    from backends import require_backend

    require_backend("local")
    assert heavy_modules(*args, cwd=tmp_path) == (exit_code, [])


# http.client: email's parser and ssl for five calls on a Unix socket (`docker.engine` reads them itself);
# uuid (it loads platform), datetime and subprocess: a few ms each that the create request does without
DOCKER_HEAVY = (
    *HEAVY, "docker", "requests", "urllib3", "asyncio", "http", "email", "ssl",
    "uuid", "platform", "datetime", "subprocess",
)  # fmt: skip


@pytest.mark.parametrize(
    "args, exit_code",
    [
        (["sandbox", "run", "--sandbox", "docker", "--", "true"], 0),
        (["sandbox", "run", "--sandbox", "docker", "--memory", "512M", "--timeout", "30", "--pids", "64",
          "--no-network", "--", "sh", "-c", "exit 7"], 7),
        (["sandbox", "run", "--sandbox", "docker", "--timeout=1", "--", "sleep", "30"], 124),
        (["sandbox", "run", "--sandbox", "docker", "--limit", "workspace_size=8M", "--limit", "file_size=1M",
          "--", "true"], 0),
    ],
    ids=["true", "options", "timeout", "limit-flags"],
)  # fmt: skip
def test_a_plain_docker_sandbox_run_imports_neither_typer_nor_docker_py_nor_asyncio(
    args: list[str], exit_code: int, tmp_path: Path
) -> None:
    """The docker backend's fast path (`sandboxes.docker.plain`) speaks to the engine's socket itself."""
    from backends import require_backend

    require_backend("docker")
    assert heavy_modules(*args, cwd=tmp_path, heavy=DOCKER_HEAVY) == (exit_code, [])


def test_docker_with_network_goes_through_the_full_path(tmp_path: Path) -> None:
    """A session network and its routes are the full path's: typer and docker-py run it."""
    from backends import require_backend

    require_backend("docker")
    code, modules = heavy_modules("sandbox", "run", "--sandbox", "docker", "--network", "--", "true",
                                  cwd=tmp_path, heavy=DOCKER_HEAVY)  # fmt: skip
    assert code == 0 and "typer" in modules and "docker" in modules


def test_other_forms_of_sandbox_run_go_through_typer(tmp_path: Path) -> None:
    """--help and a value typer would not convert are typer's to report: the fast path steps aside."""
    for args in (["sandbox", "run", "--help"], ["sandbox", "run", "--pids", "x", "--", "true"]):
        code, modules = heavy_modules(*args, cwd=tmp_path)
        assert "typer" in modules and not any(m.startswith("agents") for m in modules), args
        assert code == (0 if "--help" in args else 2)


def test_the_wrapper_does_see_the_sdk_when_a_command_imports_it(tmp_path: Path) -> None:
    """The check can fail: a command that does import the SDK is reported."""
    done = subprocess.run(
        [sys.executable, "-c", "import agents\n" + WRAPPER, ",".join(HEAVY), "--help"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert "'agents'" in done.stderr
