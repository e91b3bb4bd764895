"""Live sessions on a Ray cluster (`serve --ray`, `mcp --ray`, `SessionManager(opener=RayOpener)`):
each session a Ray actor on a node, its sandbox and kernel there; cells and commands work as on
one machine; closed, its run folder is on this machine as a local session's; its node lost, the
session is reported lost at once (no hang), its record so far kept and ended "lost" with the cause.

The cluster is Ray's one-machine multi-node `Cluster` (`ray_sessions_cluster` in tests/conftest.py): a head
with no CPUs and three one-CPU nodes, so each session (cpus = 1) takes a node of its own; a node
is lost as a machine is (`ray_cluster.lose_node`). The sandboxes are real (local backend); an
ask's model is the scripted OpenAI-wire server (`openai_server`) on loopback, streaming its reply.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from coderoom.cluster.progress import MAX_REPORT_BYTES
from coderoom.errors import SessionLost
from coderoom.record import read_record
from coderoom.record.names import RECORD_FILE
from coderoom.sandboxes.limits import Limits
from mcp_process import server_env
from openai_server import OpenAIServer, Trickle, say, server_environ
from ray_cluster import has_descendant, left_on_the_node, lose_node, ray_session_manager
from web.served import multipart, serve

LOSS_DEADLINE_S = 180  # Ray takes its health checks' time to call a node dead; generous on 2 busy cores


def node_running_a_sandbox(nodes: list[Any]) -> Any:
    [node] = [n for n in alive(nodes) if has_descendant(n.all_processes["raylet"][0].process.pid, "bwrap")]
    return node


def remove_what_the_lost_node_left(run_name: str) -> None:
    """A lost machine takes its disk with it; a node lost on this machine leaves the session's
    temporary runs folder behind in /tmp: removed here."""
    [left] = left_on_the_node(run_name)
    shutil.rmtree(left)


async def types_of(events: Any) -> list[str]:
    return [event.type async for event in events]


def alive(nodes: list[Any]) -> list[Any]:
    """The nodes not removed (a removed node's processes are gone from `all_processes`)."""
    return [n for n in nodes if "raylet" in n.all_processes and n.all_processes["raylet"][0].process.poll() is None]


async def test_a_session_runs_on_a_node_and_its_run_folder_comes_back_as_a_local_one(ray_sessions_cluster, tmp_path: Path) -> None:
    _, nodes = ray_sessions_cluster
    async with ray_session_manager(tmp_path / "runs") as sessions:
        session = await sessions.open(files={"input/x.csv": b"a\n1\n2\n"})
        assert session.node in {n.node_id for n in nodes} and session.host == "127.0.0.1"
        streamed = asyncio.ensure_future(types_of(session.subscribe()))
        await asyncio.sleep(0)  # subscribed
        first = await session.run_python("import pandas as pd\ndf = pd.read_csv('input/x.csv')\nprint(df.a.sum())")
        assert first.status == "ok" and first.text.endswith("[stdout]\n3")
        second = await session.run_python("df.a.max()")  # the same kernel, on the node
        assert second.status == "ok" and "2" in second.text
        done = await session.exec("mkdir -p output && echo hi > output/note.txt && hostname")
        assert done.exit_code == 0
        assert {"input/x.csv", "output/note.txt"} <= {f.path for f in await session.files()}
        assert await session.read_file("output/note.txt") == b"hi\n"
        run_dir = await sessions.close(session.id)
        seen = await asyncio.wait_for(streamed, 60)  # the stream ends with the record
    assert run_dir.parent == tmp_path / "runs" and (run_dir / "workspace.tar").is_file()
    events = read_record(run_dir).events
    assert (events[0].type, events[-1].type, events[-1].status) == ("run_start", "run_end", "ok")
    cells = [e.cell.number for e in events if e.type == "tool_result" and e.name == "run_python"]
    assert cells == [1, 2]
    assert seen[-1] == "run_end" and seen.count("tool_result") == 3
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [run_dir.name]  # no staging left behind
    assert left_on_the_node(run_dir.name) == []  # the node removed its copy


WORDS = " ".join(f"word{n}" for n in range(16))
HOSTILE_REPORTS = [
    "x" * (MAX_REPORT_BYTES + 1),  # too long
    "{not json",
    json.dumps({"type": "model_stream", "tokens": "many"}),  # not the model's types
    json.dumps({"type": "run_end", "status": "ok"}),  # not a progress report
    json.dumps({"type": "tool_start", "call_id": "c9", "name": "forged"}),  # progress, but the record's to say
]


async def test_a_sessions_ask_on_a_node_streams_its_replys_progress_to_subscribers_not_into_the_record(
    ray_sessions_cluster, tmp_path: Path
) -> None:
    from coderoom import SessionManager
    from coderoom.service.ray_session import RayOpener

    with OpenAIServer() as model:
        model.script([Trickle(say(WORDS), interval=0.2)])
        opener = RayOpener(server_environ(model))
        spec = f"openai-compatible:scripted@{model.url}"
        async with SessionManager(model=spec, runs_dir=tmp_path / "runs", limits=Limits(cpus=1), opener=opener) as sessions:
            session = await sessions.open()
            heard: list[Any] = []

            async def listen() -> None:
                async for event in session.subscribe():
                    heard.append(event)
                    if event.type == "model_stream" and len([e for e in heard if e.type == "model_stream"]) == 1:
                        (box, _), key = opener.progress_box(), session._key  # a hostile node's reports, in the session's place
                        for report in HOSTILE_REPORTS:
                            box.put.remote(key, report)

            listening = asyncio.ensure_future(listen())
            await asyncio.sleep(0)
            answer = await session.ask("Say the words")
            run_dir = await sessions.close(session.id)
            await asyncio.wait_for(listening, 60)
    assert answer.final_output == WORDS
    types = [e.type for e in heard]
    stream = [e for e in heard if e.type == "model_stream"]
    assert len(stream) >= 3, types  # the reply's progress, as it came (bounded: at most one each 0.25 s on the node)
    assert [e.tokens for e in stream] == sorted(e.tokens for e in stream) and stream[-1].tokens <= len(WORDS.split())
    assert types.index("model_start") < types.index("model_stream") and types.index("model_call") > max(
        i for i, t in enumerate(types) if t == "model_stream"
    )  # none after the reply is in: the page's "receiving the reply" line does not come back
    assert "forged" not in {getattr(e, "name", None) for e in heard} and types.count("run_end") == 1  # the hostile ones dropped
    recorded = [e.type for e in read_record(run_dir).events]
    assert "model_stream" not in recorded and "forged" not in (run_dir / RECORD_FILE).read_text()


def progress_boxes() -> set[str]:
    """The ids of the cluster's `ProgressBox` actors alive or about to be (Ray's own table)."""
    from ray._private import state

    return {actor_id for actor_id, actor in state.actors().items()
            if actor["State"] != "DEAD" and actor["ActorClassName"].endswith("ProgressBox")}  # fmt: skip


async def test_an_openers_progress_box_is_made_at_the_first_ask_and_shared_by_every_ask_after(
    ray_sessions_cluster, tmp_path: Path
) -> None:
    """Sessions that never ask cost the server no actor; asks that come at once make one box."""
    from coderoom import SessionManager
    from coderoom.service.ray_session import RayOpener

    with OpenAIServer() as model:
        model.script([say("one"), say("two"), say("three")])
        before = progress_boxes()  # earlier tests' openers' boxes, ending as their handles go
        opener = RayOpener(server_environ(model))
        spec = f"openai-compatible:scripted@{model.url}"
        async with SessionManager(model=spec, runs_dir=tmp_path / "runs", limits=Limits(cpus=1), opener=opener) as sessions:
            first, second = await sessions.open(), await sessions.open()
            assert (await first.exec("true")).exit_code == 0
            assert progress_boxes() - before == set()
            await asyncio.gather(first.ask("Say one"), second.ask("Say two"))
            [box] = progress_boxes() - before
            await first.ask("Say three")
            assert progress_boxes() - before == {box}


async def test_mcp_ray_serves_a_session_from_a_node_to_the_sdk_client(ray_sessions_cluster, tmp_path: Path) -> None:
    started, _ = ray_sessions_cluster
    params = StdioServerParameters(
        command=__import__("sys").executable, env=server_env(),
        args=["-m", "coderoom", "mcp", "--ray", started.address, "--runs", str(tmp_path / "runs")],
    )  # fmt: skip
    async with Client(params) as client:
        opened = await client.call_tool("open_session", {})
        assert not opened.is_error, opened.content
        sid = opened.structured_content["session_id"]
        ran = await client.call_tool("run_python", {"session_id": sid, "code": "x = 6 * 7\nprint(x)"})
        assert not ran.is_error and ran.structured_content["status"] == "ok"
        assert "42" in ran.content[0].text
        closed = await client.call_tool("close_session", {"session_id": sid})
        run_dir = Path(closed.structured_content["run_folder"])
    assert run_dir.parent == tmp_path / "runs"
    assert read_record(run_dir).events[-1].status == "ok" and (run_dir / "workspace.tar").is_file()
    assert left_on_the_node(run_dir.name) == []


async def test_a_session_no_node_can_hold_is_refused_at_once_and_nothing_is_started(ray_sessions_cluster, tmp_path: Path) -> None:
    from coderoom import SessionManager
    from coderoom.errors import SandboxUnavailable
    from coderoom.service.ray_session import RayOpener

    runs = tmp_path / "runs"
    async with SessionManager(model="offline", runs_dir=runs, limits=Limits(cpus=2), opener=RayOpener({})) as sessions:
        with pytest.raises(SandboxUnavailable, match="needs 2 cpus .* at most 1 cpus"):
            await sessions.open()  # Ray would wait for such a node forever
        assert sessions.live == []
    assert not runs.exists() or list(runs.iterdir()) == []


def test_serve_ray_reports_a_session_whose_node_is_lost_as_gone(ray_sessions_cluster, tmp_path: Path) -> None:
    started, nodes = ray_sessions_cluster
    runs = tmp_path / "runs"
    runs.mkdir()
    server = serve(runs, "--ray", started.address, "--model", "offline", "--sandbox", "local", "--limit", "cpus=1")
    try:
        csrf = {"X-Coderoom-CSRF": json.loads(server.authed("GET", "/api/config").body)["csrf"]}
        headers, body = multipart({}, [("x.csv", b"a\n1\n")])
        opened = server.authed("POST", "/api/sessions", {**headers, **csrf}, body)
        assert opened.status == 200, opened.body
        sid, run = json.loads(opened.body)["id"], json.loads(opened.body)["run"]
        listed = server.authed("GET", f"/api/sessions/{sid}/files")
        assert listed.status == 200 and b"x.csv" in listed.body
        lose_node(started, node_running_a_sandbox(nodes))
        deadline = time.monotonic() + LOSS_DEADLINE_S
        while (reply := server.authed("GET", f"/api/sessions/{sid}/files")).status == 200:
            assert time.monotonic() < deadline, "the lost session was never reported"
            time.sleep(1)
        assert reply.status == 410 and b"lost" in reply.body, reply
        assert json.loads(server.authed("POST", f"/api/sessions/{sid}/ask", {"Content-Type": "application/json", **csrf},
                                        b'{"request": "hi"}').body)["error"].startswith(f"session {sid} was lost")
    finally:
        assert server.stop() in (0, 143)
    remove_what_the_lost_node_left(run)
    end = read_record(runs / run).events[-1]
    assert (end.type, end.status) == ("run_end", "lost") and "died" in (end.cause or "")


async def test_a_cell_in_flight_when_its_node_is_lost_ends_lost_without_a_hang(ray_sessions_cluster, tmp_path: Path) -> None:
    started, nodes = ray_sessions_cluster
    async with ray_session_manager(tmp_path / "runs") as sessions:
        session = await sessions.open()
        cell = asyncio.ensure_future(session.run_python("import time\ntime.sleep(600)"))
        victim = next(n for n in alive(nodes) if n.node_id == session.node)
        deadline = time.monotonic() + 60
        while not any(e.type == "tool_start" for e in read_record(session.run_dir).events):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        await asyncio.to_thread(lose_node, started, victim)
        with pytest.raises(SessionLost, match="was lost"):
            await asyncio.wait_for(cell, LOSS_DEADLINE_S)
        assert session.closed and session.lost
        with pytest.raises(SessionLost):
            await session.exec("true")
        for _ in range(100):  # the manager forgets it at its next look, and still says why
            if session not in sessions.live:
                break
            await asyncio.sleep(0.1)
        assert sessions.live == []
        with pytest.raises(SessionLost, match="was lost"):
            sessions.get(session.id)
    remove_what_the_lost_node_left(session.run_dir.name)
    events = read_record(session.run_dir).events
    assert [e.type for e in events][:2] == ["run_start", "session_open"]
    assert [e.type for e in events][-2:] == ["tool_start", "run_end"]
    assert events[-1].status == "lost" and events[-1].saved == ["run.jsonl"]
    assert not any(has_descendant(n.all_processes["raylet"][0].process.pid, "bwrap") for n in alive(nodes))
