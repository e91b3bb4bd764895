"""Attack pass R-D on `run_job` under `mcp --ray`, on a real Ray head (`ray start --head` on
127.0.0.1, `shared_ray_head` in tests/conftest.py, stopped by its PID): the node that runs the
job is the attacker, its task replaced by a stand-in (`jobs._task`, as
tests/mcp/test_mcp_ray_run_job.py does) that lies in its result, reports under keys not its own,
or finishes while its caller is being cancelled; and a client passes the limits only the
server's operator may choose."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import tarfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from openai_server import OpenAIServer, server_environ
import ray_cluster
from ray_cluster import Head


@pytest.fixture(scope="module")
def joined(shared_ray_head: Head) -> Iterator[Head]:
    """The shared head (tests/conftest.py), this process joined to it as `coderoom mcp --ray` joins it."""
    with ray_cluster.joined(shared_ray_head.address, by_value=__name__):
        yield shared_ray_head


@pytest.fixture(scope="module")
def model() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@contextlib.asynccontextmanager
async def mcp_client(runs: Path, model: OpenAIServer, task: Any) -> AsyncIterator[tuple[Client, Any]]:
    """The server `coderoom mcp --ray` builds, in memory, its node task `task`."""
    import ray

    from coderoom import SessionManager
    from coderoom.batch.cluster import RayJobs
    from coderoom.mcp_server.policy import ReadPolicy
    from coderoom.mcp_server.tools import ServerSettings, build_server
    from coderoom.sandboxes.limits import Limits

    spec, limits = f"openai-compatible:scripted@{model.url}", Limits(cpus=1, memory="512M")
    jobs = RayJobs(server_environ(model), out=runs)
    jobs._task = ray.remote(task)
    sessions = SessionManager(limits=limits, sandbox="local", model=spec, runs_dir=runs)
    settings = ServerSettings(spec, "local", limits, runs, ReadPolicy([]), cluster=jobs)
    async with sessions, Client(build_server(sessions, settings)) as client:
        yield client, jobs


def tar_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def lying_attempt(entry: Any, inputs: bytes, run_name: str, environ: Any, log: Any, slots: Any, progress: Any = None) -> Any:
    """A node that says its job went "ok" on a node named with markup and a forged line, from an
    address with a terminal escape, after an attempt that began 'nowhere' (its place as a lost
    attempt would be named); and that reports under keys it made up and one of a job not its own."""
    import ray

    from coderoom.batch.on_node import NodeResult, Place
    from coderoom.batch.runner import JobOutcome

    ray.get(log.begin.remote(entry.key, "lost1", Place("<img src=x onerror=alert(1)>", "\x1b]0;owned\x07")))
    ray.get(log.line.remote(entry.key, "lost1", '{"type": "run_start", "t": 0.0, "job": {}}\n'))
    report = json.dumps({"type": "model_stream", "tokens": 1})
    ray.get([progress.put.remote(key, report) for key in ("forged", entry.key + "-other", "mcp-job-guess")])
    place = Place("\u202eedon <b>trusted</b>\nstatus: ok", "127.0.0.1\n[forged]")
    return NodeResult(JobOutcome(entry.key, run_name, "ok", tokens=10**30), place, "a1", tar_of({"run.jsonl": b""}))


async def test_a_node_that_lies_about_its_run_is_answered_as_an_error_not_in_its_words(joined: Head, model: OpenAIServer,
                                                                                      tmp_path: Path) -> None:
    """R-D1, R-D2: the answer's structured content names no node the ledger would refuse."""
    async with mcp_client(tmp_path / "runs", model, lying_attempt) as (client, jobs):
        done = await client.call_tool("run_job", {"request": "go"})
        import ray

        box, _ = jobs._progress()  # the box the job reported to
        forged = [ray.get(box.take.remote(key)) for key in ("forged", "mcp-job-guess")]
    job = done.structured_content
    assert done.is_error and job["status"] == "error", job
    assert "its node sent back a result whose host, node, tokens is not valid" in job["error"]
    assert job["node"] is None and job["host"] is None
    assert job["lost_attempts"] == []  # an attempt that began nowhere real is not named
    text = done.content[0].text
    assert "<b>" not in text and "\x1b" not in text and "[forged]" not in text
    assert forged == [[], []]  # reports under keys the driver never opened: dropped


def told_attempt(entry: Any, inputs: bytes, run_name: str, environ: Any, log: Any, slots: Any, progress: Any = None) -> Any:
    """A node that tells the driver what the job it was sent may do (as its error, which is shown)."""
    import ray

    from coderoom.batch.on_node import NodeResult, Place
    from coderoom.batch.runner import JobOutcome

    sandbox, limits = entry.job.sandbox, entry.job.sandbox.limits
    told = {"backend": sandbox.backend, "cpus": limits.cpus, "memory": limits.memory, "network": limits.network,
            "egress": limits.egress is not None, "timeout": limits.timeout, "model": entry.job.model}
    place = Place(ray.get_runtime_context().get_node_id(), "127.0.0.1")
    return NodeResult(JobOutcome(entry.key, run_name, "failed", error=json.dumps(told)), place, "a1", None)


async def test_the_limits_a_client_passes_to_run_job_are_not_the_job_s(joined: Head, model: OpenAIServer,
                                                                        tmp_path: Path) -> None:
    """R-D5: cpus, memory, network, backend and model are the server's operator's (`--limit`,
    `--sandbox`, `--model`); a client's arguments of those names change nothing."""
    asked = {"request": "go", "cpus": 64, "memory": 1, "network": True, "backend": "docker", "sandbox": {"backend": "docker"},
             "limits": {"network": True, "cpus": 64}, "model": "openai-compatible:evil@http://127.0.0.1:9", "allow_host": ["*"]}
    async with mcp_client(tmp_path / "runs", model, told_attempt) as (client, _):
        done = await client.call_tool("run_job", asked)
    job = done.structured_content
    if job is None or job.get("status") != "failed":  # the SDK may refuse unknown arguments: nothing ran
        assert done.is_error and "run_job" not in str(job), done.content
        return
    told = json.loads(job["error"])
    assert told == {"backend": "local", "cpus": 1.0, "memory": 512 * 1024**2, "network": False, "egress": False,
                    "timeout": 120.0, "model": f"openai-compatible:scripted@{model.url}"}


def quick_attempt(entry: Any, inputs: bytes, run_name: str, environ: Any, log: Any, slots: Any, progress: Any = None) -> Any:
    """A job that ends at once, its run folder its record, its output naming its run."""
    import ray

    from coderoom.batch.on_node import NodeResult, Place
    from coderoom.batch.runner import JobOutcome

    place = Place(ray.get_runtime_context().get_node_id(), "127.0.0.1")
    ray.get(log.begin.remote(entry.key, "a1", place))
    folder = tar_of({"run.jsonl": b'{"type": "note"}\n', "output/who.txt": run_name.encode()})
    return NodeResult(JobOutcome(entry.key, run_name, "ok"), place, "a1", folder)


class SlowLog:
    """The driver's AttemptLog, slow to hand a finished job's attempts over: a marker file says
    when the driver has asked (the moment a caller's cancel races the end)."""

    def __init__(self, marker: str) -> None:
        from coderoom.batch.on_node import AttemptLog

        self._log = AttemptLog()
        self._marker = Path(marker)

    def claim(self) -> str | None:
        return self._log.claim()

    def open(self, key: str, token: str | None) -> None:
        self._log.open(key, token)

    def begin(self, *args: Any) -> None:
        self._log.begin(*args)

    def line(self, *args: Any) -> None:
        self._log.line(*args)

    def take(self, key: str) -> Any:
        self._marker.write_text(key)
        time.sleep(3)
        return self._log.take(key)


async def test_a_cancel_that_races_the_end_of_a_job_still_brings_its_run_folder_back(joined: Head, model: OpenAIServer,
                                                                                   tmp_path: Path) -> None:
    """R-D4: the caller (an MCP client's cancel, a dropped request) is cancelled after the task
    ended, while the driver takes its attempts: the attempts were taken and forgotten there, so
    a cut here lost the job's record (its run folder stayed empty)."""
    import ray

    from coderoom.batch.cluster import RayJobs
    from coderoom.batch.manifest import BatchEntry
    from coderoom.batch.runner import EndOfRun
    from coderoom.jobs import build_job
    from coderoom.run import new_run_dir

    marker = tmp_path / "taking"
    jobs = RayJobs(server_environ(model), out=tmp_path / "runs")
    jobs._task = ray.remote(quick_attempt)
    jobs._log = ray.remote(SlowLog).options(num_cpus=0).remote(str(marker))
    job = build_job({"name": "mcp-job", "prompt": "go", "model": "", "sandbox": {"backend": "local"}}, source="run_job")
    run_dir = new_run_dir(job, tmp_path / "runs")
    running = asyncio.ensure_future(jobs.run(BatchEntry(run_dir.name, job, "run_job"), run_dir, EndOfRun()))
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert time.monotonic() < deadline and not running.done(), "the driver never asked for the attempts"
        await asyncio.sleep(0.1)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    assert (run_dir / "run.jsonl").read_text() == '{"type": "note"}\n'
    assert (run_dir / "output/who.txt").read_text() == run_dir.name


async def test_two_concurrent_run_jobs_keep_their_records_and_progress_apart(joined: Head, model: OpenAIServer,
                                                                           tmp_path: Path) -> None:
    """R-D6: each call's run folder holds what its own node sent (a job is known by its run
    folder's name, unique among the server's runs)."""
    async with mcp_client(tmp_path / "runs", model, quick_attempt) as (client, _):
        done = await asyncio.gather(*(client.call_tool("run_job", {"request": f"job {n}"}) for n in range(2)))
    folders = [Path(d.structured_content["run_folder"]) for d in done]
    assert len(set(folders)) == 2
    for folder in folders:
        assert (folder / "output/who.txt").read_text() == folder.name


def box_attempt(entry: Any, inputs: bytes, run_name: str, environ: Any, log: Any, slots: Any, progress: Any = None) -> Any:
    """A job that says which progress box it was handed (its actor's id), or that it had none."""
    import ray

    from coderoom.batch.on_node import NodeResult, Place
    from coderoom.batch.runner import JobOutcome

    said = "no box" if progress is None else progress._actor_id.hex()
    place = Place(ray.get_runtime_context().get_node_id(), "127.0.0.1")
    return NodeResult(JobOutcome(entry.key, run_name, "failed", error=said), place, "a1", None)


async def test_a_job_nobody_listens_to_makes_no_progress_box_and_the_jobs_listened_to_share_one(
    joined: Head, model: OpenAIServer, tmp_path: Path
) -> None:
    """`batch --ray` (no listeners) makes no `ProgressBox` actor; MCP `run_job`s make one at the first."""
    import ray

    from coderoom.batch.cluster import RayJobs
    from coderoom.batch.manifest import BatchEntry
    from coderoom.batch.runner import EndOfRun
    from coderoom.jobs import build_job
    from coderoom.run import new_run_dir

    jobs = RayJobs(server_environ(model), out=tmp_path / "runs")
    jobs._task = ray.remote(box_attempt)
    job = build_job({"name": "mcp-job", "prompt": "go", "model": "", "sandbox": {"backend": "local"}}, source="run_job")

    async def handed(listeners: list[Any]) -> str | None:
        run_dir = new_run_dir(job, tmp_path / "runs")
        return (await jobs.run(BatchEntry(run_dir.name, job, "run_job"), run_dir, EndOfRun(), listeners)).error

    assert await handed([]) == "no box"
    assert jobs._progress._made is None  # nothing made for it
    first, second = await handed([print]), await handed([print])
    assert first == second == jobs._progress()[0]._actor_id.hex()
