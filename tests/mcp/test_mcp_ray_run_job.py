"""`run_job` under `coderoom mcp --ray`: on a real Ray head (`ray start --head` on 127.0.0.1,
`shared_ray_head` in tests/conftest.py, stopped by its PID) the run goes to the cluster as one job of `batch --ray` does: the answer and
the run folder come back here, the answer names the node, the streamed reply's progress reaches
the MCP client as it does for a run on the server's machine, a run folder a hostile node sends
goes through the exit policy, and a client that drops its call leaves nothing running on the node.

The model is the scripted OpenAI-wire server (`openai_server`) on loopback, streaming its reply a
word at a time (`Trickle`); the sandboxes are real (local backend).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from coderoom.cluster import node_folders
from coderoom.hostile.exits import LEFT_OUT_NOTE
from coderoom.record import read_record
from openai_server import OpenAIServer, Trickle, call, say, server_environ
import ray_cluster
from ray_cluster import Head, has_descendant

WORDS = " ".join(f"word{n}" for n in range(12))
STOPPED_WITHIN_S = 60


@pytest.fixture(scope="module")
def head(shared_ray_head: Head) -> Head:
    return shared_ray_head


@pytest.fixture(scope="module")
def model() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def joined(head: Head) -> Iterator[Head]:
    """This process joined to the head as `coderoom mcp --ray` joins it (`cluster.connect`)."""
    with ray_cluster.joined(head.address):
        yield head


@contextlib.asynccontextmanager
async def mcp_client(runs: Path, model: OpenAIServer, *, cluster: bool) -> AsyncIterator[tuple[Client, Any]]:
    """The server `coderoom mcp [--ray]` builds (run_job on the cluster, or here), in memory."""
    from coderoom import SessionManager
    from coderoom.batch.cluster import RayJobs
    from coderoom.mcp_server.policy import ReadPolicy
    from coderoom.mcp_server.tools import ServerSettings, build_server
    from coderoom.sandboxes.limits import Limits

    spec, limits = f"openai-compatible:scripted@{model.url}", Limits()
    jobs = RayJobs(server_environ(model), out=runs) if cluster else None
    sessions = SessionManager(limits=limits, sandbox="local", model=spec, runs_dir=runs)
    settings = ServerSettings(spec, "local", limits, runs, ReadPolicy([]), cluster=jobs)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in server_environ(model).items():  # the server's model settings (here: for the local run)
            patch.setenv(name, value)
        async with sessions, Client(build_server(sessions, settings)) as client:
            yield client, jobs


def script(model: OpenAIServer) -> None:
    model.script([
        call("exec_command", cmd="mkdir -p output/.git && echo hi > output/hello.txt && echo x > output/.git/config"),
        Trickle(say(WORDS), interval=0.2),
    ])


async def run_job(client: Client) -> tuple[Any, list[str]]:
    heard: list[str] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        heard.append(message or "")

    done = await client.call_tool("run_job", {"request": "Say hello in output/hello.txt", "outputs": ["output/hello.txt"]},
                                  progress_callback=progress)
    return done, heard


def turns(heard: list[str]) -> list[int]:
    """The turn each progress message names (the latest message goes, at most one each 0.25 s)."""
    return [int(m.split()[1].rstrip(":")) for m in heard]


def streamed(heard: list[str], turn: int = 2) -> list[int]:
    """The token counts the progress messages gave while the reply of `turn` streamed in."""
    said = f"turn {turn}: receiving the reply: "
    return [int(m.split(said)[1].split()[0]) for m in heard if m.startswith(said)]


async def test_run_job_runs_on_the_cluster_and_its_answer_names_the_node(joined: Head, model: OpenAIServer, tmp_path: Path) -> None:
    script(model)
    async with mcp_client(tmp_path / "runs", model, cluster=True) as (client, _):
        done, heard = await run_job(client)
    job = done.structured_content
    assert not done.is_error, done.content
    assert (job["status"], job["node"], job["host"], job["lost_attempts"]) == ("ok", joined.node_id(), "127.0.0.1", [])
    folder = Path(job["run_folder"])
    assert folder.parent == tmp_path / "runs" and (folder / "output/hello.txt").read_text() == "hi\n"
    assert {p.name for p in folder.iterdir()} >= {"run.jsonl", "workspace.tar", "output"}
    assert job["final_output"] == WORDS and read_record(folder).events[-1].status == "ok"
    # the planted repository stayed on the node (its exit), the answer links the output only
    assert not (folder / "output/.git").exists() and "output/.git" in (folder / LEFT_OUT_NOTE).read_text()
    assert [o["uri"] for o in job["outputs"]] == [f"coderoom://run/{folder.name}/output/hello.txt"]
    # the reply streamed on the node, its progress heard here, growing
    counts = streamed(heard)
    assert len(counts) >= 2 and counts == sorted(counts) and counts[-1] >= 10, heard
    assert turns(heard) == sorted(turns(heard)) and "turn 2: waiting for the model" in heard
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [folder.name]  # no lost attempt


async def test_the_progress_of_a_run_here_is_what_a_cluster_run_tells(joined: Head, model: OpenAIServer, tmp_path: Path) -> None:
    """The same messages, in the same form (`mcp_server.job_progress`), from the server's machine."""
    script(model)
    async with mcp_client(tmp_path / "runs", model, cluster=False) as (client, _):
        done, heard = await run_job(client)
    assert not done.is_error and done.structured_content["node"] is None
    assert turns(heard) == sorted(turns(heard)) and "turn 2: waiting for the model" in heard
    counts = streamed(heard)
    assert len(counts) >= 2 and counts[-1] >= 10, heard


def hostile_attempt(entry: Any, inputs: bytes, run_name: str, environ: Any, log: Any, slots: Any, progress: Any = None) -> Any:
    """A node under an adversary's control: its 'run folder' a tar of a planted hook, a link
    out of the folder and a repository, beside a record; its progress a report of another type,
    an oversized one and a terminal escape."""
    import json

    import ray

    from coderoom.batch.on_node import NodeResult, Place
    from coderoom.batch.runner import JobOutcome

    reports = ('{"type": "run_end", "status": "ok"}', "x" * (1 << 17),
               json.dumps({"type": "model_stream", "tokens": 7, "text": "\x1b]0;owned\x07"}))
    ray.get([progress.put.remote(entry.key, report + "\n") for report in reports])
    time.sleep(3)  # the driver relays what came (it takes the box's reports each 0.25 s)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, kind, data, link in [
            ("run.jsonl", tarfile.REGTYPE, b"", ""), ("output/hello.txt", tarfile.REGTYPE, b"hi\n", ""),
            ("output/.git/config", tarfile.REGTYPE, b"[core]\n\tfsmonitor = touch /tmp/owned\n", ""),
            (".envrc", tarfile.REGTYPE, b"touch /tmp/owned\n", ""), ("output/up", tarfile.SYMTYPE, b"", "/etc"),
        ]:
            info = tarfile.TarInfo(name)
            info.type, info.size, info.linkname = kind, len(data), link
            tar.addfile(info, io.BytesIO(data) if data else None)
    place = Place(ray.get_runtime_context().get_node_id(), "127.0.0.1")
    return NodeResult(JobOutcome(entry.key, run_name, "ok"), place, "a1", buffer.getvalue())


async def test_a_run_folder_a_hostile_node_sends_goes_through_the_exit_policy(joined: Head, model: OpenAIServer,
                                                                               tmp_path: Path) -> None:
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the stand-in runs on the node
    async with mcp_client(tmp_path / "runs", model, cluster=True) as (client, jobs):
        jobs._task = ray.remote(hostile_attempt)
        done, heard = await run_job(client)
    folder = Path(done.structured_content["run_folder"])
    assert (folder / "output/hello.txt").read_text() == "hi\n"
    assert not (folder / "output/.git").exists() and not (folder / ".envrc").exists()
    assert not (folder / "output/up").exists()
    note = (folder / LEFT_OUT_NOTE).read_text()
    assert "output/.git" in note and ".envrc" in note and "output/up" in note
    assert streamed(heard, turn=0) == [7], heard  # only the well-formed report, its text never shown raw
    assert all("\x1b" not in message for message in heard)


def job_folders_on_the_node(runs: Path) -> list[Path]:
    """The node's temporary folders (`batch.on_node`) of the jobs whose run folders are in `runs`
    (the node shares this machine's temp dir)."""
    names = {p.name for p in runs.iterdir() if p.name.startswith("mcp-job-")}
    found = Path(tempfile.gettempdir()).glob(f"{node_folders.BATCH_PREFIX}*")
    return [p for p in found if any((p / name).is_dir() for name in names)]


def test_a_client_that_drops_its_run_job_leaves_nothing_running_on_the_node(head: Head, model: OpenAIServer, http_server,
                                                                            tmp_path: Path) -> None:
    """Over HTTP (`presence`): the call's request dropped mid-reply, the task on the node is
    cancelled, its sandbox gone, and its record so far is in the run folder here."""
    model.script([call("exec_command", cmd="echo started"), Trickle(say(" ".join(["slow"] * 400)), interval=0.5)])
    server = http_server("--ray", head.address, "--runs", str(tmp_path / "runs"), "--model", f"openai-compatible:scripted@{model.url}")

    async def drop_mid_reply() -> None:
        replying = asyncio.Event()

        async def progress(value: float, total: float | None, message: str | None) -> None:
            if (message or "").startswith("turn 2: receiving the reply"):
                replying.set()

        async with server.client() as client:
            call_ = asyncio.ensure_future(client.call_tool("run_job", {"request": "go"}, progress_callback=progress))
            await asyncio.wait_for(replying.wait(), 120)
            assert has_descendant(head.pid, "bwrap")  # its sandbox runs on the node
            [running] = job_folders_on_the_node(tmp_path / "runs")
            assert running not in node_folders.abandoned_folders()  # a live job's: never pruned
            call_.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call_

    asyncio.run(drop_mid_reply())
    deadline = time.monotonic() + STOPPED_WITHIN_S
    while has_descendant(head.pid, "bwrap") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not has_descendant(head.pid, "bwrap"), "the job's sandbox still runs on the node"
    [folder] = [p for p in (tmp_path / "runs").iterdir() if p.name.startswith("mcp-job-")]
    # the server keeps the record so far once the dropped call's cancel reaches it (the cluster's
    # log answering within CANCEL_WAIT_S): the node's sandbox may be gone first (CI once read the
    # folder before then). The record appears whole, so a reader never sees part of it.
    from coderoom.batch.cluster import CANCEL_WAIT_S

    deadline = time.monotonic() + CANCEL_WAIT_S + 60
    while not (folder / "run.jsonl").exists():
        assert time.monotonic() < deadline, "the job's record so far was never kept"
        time.sleep(0.2)
    events = read_record(folder).events
    assert events[0].type == "run_start" and any(e.type == "tool_start" for e in events)
    # a forced cancel kills the job's worker, which leaves its folder on the node (R-C5): `sandbox prune` judges it
    # dead once the worker has exited. Ray kills a force-cancelled worker's children (its sandbox) before the worker
    # itself, and the record is kept meanwhile, so the worker may still be alive here (CI once looked first)
    [left] = job_folders_on_the_node(tmp_path / "runs")
    deadline = time.monotonic() + STOPPED_WITHIN_S
    while left not in node_folders.abandoned_folders():
        assert time.monotonic() < deadline, "the cancelled job's worker still owns its folder on the node"
        time.sleep(0.2)
    shutil.rmtree(left)  # not `prune` here: other runs on this machine share its temp dir


def dying_attempt(entry: Any, inputs: bytes, run_name: str, environ: Any, log: Any, slots: Any, progress: Any = None) -> Any:
    """Each attempt's worker dies as a lost node's does, after telling the driver it began and
    writing one record line (a lost attempt's partial record)."""
    import os

    import ray

    from coderoom.batch.on_node import Place

    attempt = os.urandom(4).hex()
    ray.get(log.begin.remote(entry.key, attempt, Place(ray.get_runtime_context().get_node_id(), "127.0.0.1")))
    ray.get(log.line.remote(entry.key, attempt, '{"type": "run_start", "t": 0.0, "job": {}}\n'))
    os._exit(1)


async def test_a_job_whose_every_attempt_is_lost_is_a_tool_error_naming_the_cause(joined: Head, model: OpenAIServer,
                                                                                  tmp_path: Path) -> None:
    """Run again as a batch job is (NODE_RETRIES), then the cause; each attempt's record kept."""
    import ray

    from coderoom.batch.cluster import NODE_RETRIES

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    async with mcp_client(tmp_path / "runs", model, cluster=True) as (client, jobs):
        jobs._task = ray.remote(dying_attempt)
        done, _ = await run_job(client)
    assert done.is_error
    job = done.structured_content
    assert job["status"] == "error" and "the cluster could not run it (WorkerCrashedError" in job["error"]
    lost = job["lost_attempts"]
    assert len(lost) == NODE_RETRIES + 1 and {a["host"] for a in lost} == {"127.0.0.1"}
    for attempt in lost:
        assert read_record(tmp_path / "runs" / Path(attempt["run_folder"]).name).events[0].type == "run_start"
