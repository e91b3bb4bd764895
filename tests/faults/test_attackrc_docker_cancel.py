"""Attack pass R-D9: a client's cancel of a `run_job` running on a Ray node with the docker
backend (`ray.cancel(force=True)`: the worker SIGKILLed mid-reply, its sandbox's command still
running). The container is no child of the worker: it must end by itself (init.py's
--exit-on-eof, within its recovery window when kept), not run on until someone prunes the node.
A real head on 127.0.0.1 (stopped by its PID), the scripted model on loopback, real dockerd."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from backends import require_backend
from openai_server import OpenAIServer, Trickle, call, say, server_environ
from ray_cluster import descendants, ray_head, require_ray

WINDOW_S = 3  # CODEROOM_DOCKER_RECOVERY_S on the node: a kept container's wait for a recovery (the
# production 600 s cut through the host's own setting: the container ends by itself at it, whatever it is)
GONE_WITHIN_S = WINDOW_S + 60


def coderoom_containers() -> dict[str, dict[str, str]]:
    """Running coderoom sandbox containers (everyone's on this machine) by id, with their labels."""
    ids = subprocess.run(["docker", "ps", "-q", "--filter", "label=coderoom.sandbox"], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    if not ids:
        return {}
    shown = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, timeout=60).stdout or "[]"
    return {c["Id"]: c["Config"]["Labels"] or {} for c in json.loads(shown)}


def test_a_cancelled_run_job_s_docker_sandbox_ends_without_a_prune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_ray()
    require_backend("docker")
    monkeypatch.setenv("CODEROOM_DOCKER_RECOVERY_S", str(WINDOW_S))  # the head and its workers inherit it
    with OpenAIServer() as model, ray_head(num_cpus=2) as head:
        from coderoom.batch.cluster import RayJobs
        from coderoom.batch.manifest import BatchEntry
        from coderoom.batch.runner import EndOfRun
        from coderoom.cluster.connect import connect
        from coderoom.jobs import build_job
        from coderoom.run import new_run_dir

        connect(head.address)
        import ray

        model.script([call("exec_command", cmd="sleep 600"), Trickle(say("never"), interval=1)])
        mine: set[str] = set()
        try:
            async def cancel_while_the_sandbox_runs() -> None:
                jobs = RayJobs(server_environ(model), out=tmp_path / "runs")
                job = build_job({"name": "mcp-job", "prompt": "go", "model": f"openai-compatible:scripted@{model.url}",
                                 "sandbox": {"backend": "docker", "limits": {"cpus": 1, "memory": "512M"}}},
                                source="run_job")
                run_dir = new_run_dir(job, tmp_path / "runs")
                running = asyncio.ensure_future(jobs.run(BatchEntry(run_dir.name, job, "run_job"), run_dir, EndOfRun(),
                                                         [lambda event: None]))
                deadline = time.monotonic() + 300
                while not mine:  # its container, made by a worker under the head, running `sleep 600`
                    assert time.monotonic() < deadline and not running.done(), "the job's container never started"
                    await asyncio.sleep(1)
                    workers = set(descendants(head.pid))
                    mine.update(c for c, labels in coderoom_containers().items()
                                if int(labels.get("coderoom.host-pid", "0")) in workers)
                await asyncio.sleep(3)  # the model's exec_command is under way in it
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running

            asyncio.run(cancel_while_the_sandbox_runs())
            deadline = time.monotonic() + GONE_WITHIN_S
            while mine & set(coderoom_containers()) and time.monotonic() < deadline:
                time.sleep(0.25)
            assert not mine & set(coderoom_containers()), "the cancelled job's container still runs on the node"
        finally:
            for container in mine & set(coderoom_containers()):  # only this test's container, by id
                subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=60)
            ray.shutdown()
