"""The end-to-end checks of the llama.cpp tests, on both wire formats through the repo's loopback
server: a model that calls a tool that does not exist and sends arguments that are not JSON still
gets a run that ends with a clear status and a complete record, in bounded time, leaving nothing.
(The real llama-server speaks Chat Completions only; the Responses API is covered here.)"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from coderoom.jobs import build_job
from coderoom.record import read_record
from coderoom.run import run_job
from coderoom.sandboxes.leases import read_lease
from openai_server import Call, OpenAIServer, Reply, call, say, server_environ, spec_for

APIS = ["chat_completions", "responses"]


def _session_folders() -> set[Path]:
    """Local session folders whose lease names this process (other runs on the machine aside)."""
    return {
        folder for folder in Path(tempfile.gettempdir()).glob("coderoom-local-*")
        if (owner := read_lease(folder)) is not None and owner.pid == os.getpid()
    }


@pytest.mark.parametrize("api", APIS)
async def test_a_clumsy_model_gets_a_clear_end_and_a_complete_record(
    openai_server: OpenAIServer, api: str, tmp_path: Path
) -> None:
    openai_server.script([
        call("open_browser", url="x"),  # a tool it does not have
        Reply(calls=(Call("exec_command", "{not json"),)),  # arguments that do not parse
        call("exec_command", cmd="mkdir -p output && echo 2 > output/count.txt"),
        say("There are 2 rows."),
    ])  # fmt: skip
    job = build_job({
        "name": "clumsy", "prompt": "Count the rows and write output/count.txt.",
        "outputs": ["output/count.txt"], "model": spec_for(api, openai_server), "max_turns": 6,
    })  # fmt: skip
    started = time.monotonic()
    result = await run_job(job, run_dir=tmp_path / "run", environ=server_environ(openai_server))
    assert time.monotonic() - started < 120
    assert result.status == "ok", result.error
    events = read_record(result.run_dir).events
    assert events[0].type == "run_start" and events[-1].type == "run_end" and read_record(result.run_dir).unfinished is None
    assert events[-1].usage.requests == 4
    # the unknown tool and the bad arguments went back to the model as tool errors, not run errors
    outputs = [o for request in openai_server.requests for o in request.tool_outputs]
    assert any("open_browser" in o for o in outputs)
    assert any("Invalid tool arguments" in o or "JSON" in o for o in outputs)
    assert (tmp_path / "run/output/count.txt").read_text() == "2\n"
    assert _session_folders() == set()  # nothing left behind
