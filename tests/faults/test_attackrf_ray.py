"""Attack pass R-F on live sessions under `--ray` (`service.ray_session`): the bound on each call
to the node (`RaySession._deadline`) and the progress box made at the first ask
(`RayOpener.progress_box`), from the side of a client, a model and the sandboxed code.

A real one-node cluster (`ray_sessions_cluster`), real sandboxes, the scripted OpenAI-wire model."""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path

import pytest

from coderoom.errors import RequestRefused
from coderoom.record import read_record
from coderoom.sandboxes.limits import Limits
from openai_server import OpenAIServer, call, say, server_environ

RAY_NODES = 1

SNOOP = (  # everything the sandbox can read of the processes and the place it runs in
    "env; for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\\0' ' ' < $f; echo; done; "
    "grep -rs . /tmp /workspace 2>/dev/null | head -c 200000"
)


def progress_boxes() -> set[str]:
    from ray._private import state

    return {actor_id for actor_id, actor in state.actors().items()
            if actor["State"] != "DEAD" and actor["ActorClassName"].endswith("ProgressBox")}  # fmt: skip


async def test_r_f7_a_clients_command_timeout_that_is_no_number_of_seconds_is_refused_and_the_session_lives_on(
    ray_sessions_cluster, tmp_path: Path
) -> None:
    from coderoom import SessionManager
    from coderoom.service.ray_session import RayOpener

    async with SessionManager(model="offline", runs_dir=tmp_path / "runs", limits=Limits(cpus=1), opener=RayOpener({})) as sessions:
        session = await sessions.open()
        for hostile in (-1000.0, float("nan"), 0.0, -1.0):  # an MCP client's `exec` timeout, as sent
            with pytest.raises(RequestRefused, match="more than 0 seconds"):
                await session.exec("true", hostile)
            assert session.lost is None  # before: the driver's wait on the node ended at once, the actor was killed
        assert (await session.exec("echo alive", float("inf"))).stdout == "alive\n"  # "no bound of its own"


async def test_r_f8_the_sandbox_never_sees_its_sessions_key_in_the_box_and_the_box_goes_with_the_server(
    ray_sessions_cluster, tmp_path: Path
) -> None:
    from coderoom import SessionManager
    from coderoom.service.ray_session import RayOpener

    with OpenAIServer() as model:
        model.script([call("exec_command", cmd=SNOOP), say("done")])
        before = progress_boxes()
        opener = RayOpener(server_environ(model))
        spec = f"openai-compatible:scripted@{model.url}"
        async with SessionManager(model=spec, runs_dir=tmp_path / "runs", limits=Limits(cpus=1), opener=opener) as sessions:
            session = await sessions.open()
            key = session._key  # the session's place in the box: the node has it while the ask runs
            await session.ask("look around")
            assert len(progress_boxes() - before) == 1
            run_dir = await sessions.close(session.id)
        [result] = [e for e in read_record(run_dir).events if e.type == "tool_result" and e.name == "exec_command"]
        seen = result.model_dump_json()
        assert "PATH=" in seen and key not in seen  # the snoop ran; the key is in no process, file or variable it reads
        del opener, sessions, session
        gc.collect()
        deadline = time.monotonic() + 60
        while progress_boxes() - before and time.monotonic() < deadline:  # Ray ends it with its last handle
            await asyncio.sleep(1)
        assert progress_boxes() - before == set()


async def test_r_f7_a_local_session_refuses_the_same_timeouts_nan_too(tmp_path: Path) -> None:
    """The one rule (`session.check_command_timeout`) on one machine: NaN passed `timeout <= 0`."""
    from coderoom import SessionManager

    async with SessionManager(model="offline", runs_dir=tmp_path / "runs") as sessions:
        session = await sessions.open()
        for hostile in (-1000.0, float("nan"), 0.0):
            with pytest.raises(RequestRefused, match="more than 0 seconds"):
                await session.exec("true", hostile)
        assert (await session.exec("echo alive")).stdout == "alive\n"
