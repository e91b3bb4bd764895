"""`--package SPEC` on `coderoom batch`, `serve` and `mcp`, as on `run` and `sandbox run`: every
job's or session's sandbox gets the declared environment, built once before anything runs, and
the run record keeps its exact versions (a malformed package is exit 2 in the same words from
every command: `core/test_one_limits_parser.py`).

Offline only: the package is a tiny wheel made here, in a folder pip is pointed at with its own
configuration (PIP_FIND_LINKS, PIP_NO_INDEX), as a user without a job file would; the model is
the offline analyst or the MCP client itself.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from backends import require_backend
from mcp_process import start_http
from support.wheels import make_wheel
from web.served import multipart, serve

from coderoom.record import read_record
from coderoom.sandboxes.local import packages

COMMAND = [sys.executable, "-m", "coderoom"]
INSTALLED = [{"name": "crtiny", "version": "1.2.3"}]


@pytest.fixture(autouse=True)
def local_backend() -> None:
    require_backend("local")


@pytest.fixture
def pip_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A wheel folder pip reads from and nothing else, and a cache of this test's own (set here
    too, for the helpers that start servers with this process's environment)."""
    make_wheel(tmp_path / "wheels", "crtiny", "1.2.3", "VALUE = 42\n")
    settings = {
        "PIP_FIND_LINKS": str(tmp_path / "wheels"), "PIP_NO_INDEX": "1",
        packages.CACHE_VARIABLE: str(tmp_path / "cache"),
    }  # fmt: skip
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    return settings


def energy_job(root: Path, name: str) -> Path:
    """A job folder the offline analyst finishes: an hourly series with one spike."""
    folder = root / name
    folder.mkdir(parents=True)
    rows = ["timestamp,energy_kwh"] + [
        f"2024-01-{1 + h // 24:02d} {h % 24:02d}:00,{50 + 10 * math.sin(h / 24 * 2 * math.pi) + (200 if h == 100 else 0):.2f}"
        for h in range(240)
    ]
    (folder / "e.csv").write_text("\n".join(rows) + "\n")
    (folder / "coderoom.toml").write_text(
        'prompt = "Find abnormal energy use in input/e.csv"\nmodel = "offline"\n[inputs]\n"input/e.csv" = "e.csv"\n'
        '[[outputs]]\npath = "output/anomalies.csv"\n'
    )
    return folder


def coderoom(*args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *map(str, args)], capture_output=True, text=True, timeout=600, env={**os.environ, **env})


def test_batch_gives_every_job_the_packages_and_records_their_versions(tmp_path: Path, pip_env: dict[str, str]) -> None:
    jobs = [energy_job(tmp_path, "a"), energy_job(tmp_path, "b")]
    done = coderoom("batch", *jobs, "--out", tmp_path / "out", "--package", "crtiny", env=pip_env)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (tmp_path / "out" / "batch.jsonl").read_text().splitlines()]
    run_dirs = [line["run_dir"] for line in lines if line["event"] == "end"]
    assert len(run_dirs) == 2
    for run_dir in run_dirs:
        start = read_record(tmp_path / "out" / run_dir).events[0]
        assert start.job["sandbox"]["environment"]["packages"] == ["crtiny"]
        assert start.environment is not None and start.environment["installed"] == INSTALLED


def test_serve_gives_every_session_the_packages(tmp_path: Path, pip_env: dict[str, str]) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    served = serve(runs, "--package", "crtiny", "--sandbox", "local", env=pip_env)
    try:
        csrf = {"X-Coderoom-CSRF": json.loads(served.authed("GET", "/api/config").body)["csrf"]}
        headers, body = multipart({"model": "offline", "sandbox": "local"}, [("data.csv", b"a,b\n1,2\n")])
        reply = served.authed("POST", "/api/sessions", {**csrf, **headers}, body)
        assert reply.status == 200, reply.body
        start = read_record(runs / json.loads(reply.body)["run"]).events[0]
    finally:
        assert served.stop() == 143
    assert start.job["sandbox"]["environment"]["packages"] == ["crtiny"]
    assert start.environment is not None and start.environment["installed"] == INSTALLED


async def test_mcp_sessions_import_the_packages(tmp_path: Path, pip_env: dict[str, str]) -> None:
    server = start_http("--package", "crtiny", "--sandbox", "local", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    try:
        async with server.client() as client:
            opened = await client.call_tool("open_session", {})
            assert not opened.is_error
            sid = "\n".join(b.text for b in opened.content if b.type == "text").split()[1]
            done = await client.call_tool("run_python", {"session_id": sid, "code": "import crtiny\nprint(crtiny.VALUE)"})
            shown = "\n".join(b.text for b in done.content if b.type == "text")
            assert not done.is_error and "42" in shown and "Error" not in shown, shown
            await client.call_tool("close_session", {"session_id": sid})
    finally:
        server.process.terminate()
        server.process.wait(timeout=60)
