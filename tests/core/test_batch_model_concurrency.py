"""`coderoom batch --model-concurrency N`: however many jobs run at once, at most N model
requests are in flight across the batch, on this machine and on a Ray cluster (one actor holds
the budget every node's jobs lease from), so a provider's rate limit is not tripped.

Real parts: local sandboxes, a loopback OpenAI-compatible server that holds each request a
while and records the most in flight at once, and a real Ray head on 127.0.0.1 (`shared_ray_head`
in tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from backends import require_backend
from openai_server import OpenAIServer, say, server_environ
from ray_cluster import Head
from test_batch import COMMAND, ends, ledger

HOLD_S = 2.0  # each model request, so that concurrent ones overlap
JOBS = 4


@pytest.fixture(autouse=True)
def _local_sandbox() -> None:
    require_backend("local")


def batch(tmp_path: Path, server: OpenAIServer, *flags: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Four jobs whose model is `server`, all started at once (`--parallel 4`)."""
    jobs = []
    for index in range(JOBS):
        folder = tmp_path / f"job{index}"
        folder.mkdir(parents=True)
        (folder / "coderoom.toml").write_text(
            f'prompt = "say hello"\nmodel = "openai-compatible:scripted@{server.url}"\n'
        )
        jobs.append(str(folder))
    out = tmp_path / "out"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}
    done = subprocess.run(
        [*COMMAND, "batch", *jobs, "--out", str(out), "--parallel", str(JOBS), *flags],
        capture_output=True, text=True, timeout=600, env={**environ, **server_environ(server)},
    )  # fmt: skip
    return out, done


def answered_every_job(out: Path, server: OpenAIServer, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, done.stderr
    assert sorted(ends(ledger(out))) == [f"job{index}" for index in range(JOBS)]
    assert all(line["status"] == "ok" for line in ends(ledger(out)).values())
    assert len(server.requests) == JOBS and not server.errors


def test_a_batch_of_parallel_jobs_keeps_one_model_request_in_flight_with_model_concurrency_1(tmp_path: Path) -> None:
    with OpenAIServer([say("hello")] * JOBS, hold=HOLD_S) as server:
        out, done = batch(tmp_path / "bounded", server, "--model-concurrency", "1")
    answered_every_job(out, server, done)
    assert server.peak == 1
    with OpenAIServer([say("hello")] * JOBS, hold=HOLD_S) as server:  # the same batch unbounded
        out, done = batch(tmp_path / "unbounded", server)
    answered_every_job(out, server, done)
    assert server.peak > 1


def test_on_a_ray_cluster_the_bound_holds_across_every_job(shared_ray_head: Head, tmp_path: Path) -> None:
    """The shared head has two CPUs: two of the four jobs run at once there, each asking the model."""
    with OpenAIServer([say("hello")] * JOBS, hold=HOLD_S) as server:
        out, done = batch(tmp_path, server, "--model-concurrency", "1", "--ray", shared_ray_head.address)
    answered_every_job(out, server, done)
    assert {line["host"] for line in ends(ledger(out)).values()} == {"127.0.0.1"}
    assert server.peak == 1


def test_model_concurrency_below_1_is_a_usage_error(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        out, done = batch(tmp_path, server, "--model-concurrency", "0")
    assert done.returncode == 2 and "--model-concurrency" in done.stderr
    assert not out.exists() and not server.requests
