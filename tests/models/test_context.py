"""Every request fits the model's context: a whole run in the default sandbox against the loopback
server behaving like llama.cpp with `-c 2304` (it says so at /props and refuses, with llama.cpp's
400, a request whose body exceeds the context). The scripted model prints large outputs turn
after turn; without trimming the third request would already be refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coderoom.jobs import build_job
from coderoom.models import resolve_model
from coderoom.models.failures import ContextTooSmall
from coderoom.record import read_record
from coderoom.run import run_job
from openai_server import OpenAIServer, call, say, spec_for

N_CTX = 2304  # llama.cpp -c 2048 plus room for write_stdin's schema (issue 12), so the newest output fits
# ~500 characters each: the instructions and tool schemas already take over half of the context
BIG = "seq -f 'row %g of a long output' 1 {n}"
SCRIPT_TURNS = 5


def _job(server: OpenAIServer, **model: object) -> object:
    return build_job({
        "name": "context",
        "prompt": "Print some long outputs, then answer.",
        "model": {"spec": spec_for("chat_completions", server), "max_tokens": 128, **model},
        "max_turns": SCRIPT_TURNS + 2,
    })  # fmt: skip


async def test_large_tool_outputs_are_trimmed_and_no_request_is_refused(tmp_path: Path) -> None:
    script = [call("exec_command", cmd=BIG.format(n=20 + turn)) for turn in range(SCRIPT_TURNS)]
    with OpenAIServer([*script, say("Done.")], api_key="no-key", n_ctx=N_CTX) as server:
        environ = {**os.environ, "CODEROOM_MODEL_MAX_RETRIES": "0"}
        result = await run_job(_job(server), run_dir=tmp_path / "run", environ=environ)

    assert not server.errors, server.errors
    assert server.refused == [] and result.status == "ok", (server.refused, result.error)
    assert result.final_output == "Done."
    assert "/props" in server.probes
    sent = [seen for seen in server.requests if seen.path == "/v1/chat/completions"]
    assert len(sent) == SCRIPT_TURNS + 1
    outputs = [seen.tool_outputs for seen in sent]
    # every output reached the model whole the first time it was sent ...
    for turn in range(1, SCRIPT_TURNS + 1):
        assert outputs[turn][-1].rstrip().endswith(f"row {19 + turn} of a long output")
    # ... and later requests carry the older ones as markers, or (the oldest) not at all
    assert all(text.startswith("[coderoom: output trimmed to fit the model's context: ") for text in outputs[-1][:-1])
    assert len(outputs[-1]) < SCRIPT_TURNS
    events = read_record(result.run_dir).events
    trims = [e for e in events if e.type == "context_trimmed"]
    assert trims, "the record says nothing about trimming"
    assert all(t.context_size == N_CTX and t.source.endswith("/props") for t in trims)
    assert all(t.tokens_after <= t.budget < t.tokens_before for t in trims)
    assert sum(t.outputs_trimmed for t in trims) >= SCRIPT_TURNS - 1
    assert max(t.chars_removed for t in trims) > 1_500


async def test_without_trimming_the_same_server_refuses(tmp_path: Path) -> None:
    """The check above can fail: the server really refuses what an untrimmed history would be."""
    script = [call("exec_command", cmd=BIG.format(n=200)), call("exec_command", cmd=BIG.format(n=201))]
    with OpenAIServer([*script, say("Done.")], api_key="no-key", n_ctx=N_CTX) as server:
        resolved = resolve_model(spec_for("chat_completions", server), environ={"CODEROOM_MODEL_MAX_RETRIES": "0"})
        resolved.probe = None
        resolved.model.context.probe = None  # the guard no longer knows the context size
        environ = {**os.environ, "CODEROOM_MODEL_MAX_RETRIES": "0"}
        result = await run_job(_job(server), run_dir=tmp_path / "run", environ=environ, model=resolved)

    assert server.refused and result.status == "error"
    assert "exceeds the available context size" in (result.error or "")
    assert server.url in (result.error or "")


async def test_a_context_too_small_for_even_the_instructions_ends_the_run_clearly(tmp_path: Path) -> None:
    with OpenAIServer([], api_key="no-key", n_ctx=600) as server:
        environ = {**os.environ, "CODEROOM_MODEL_MAX_RETRIES": "0"}
        result = await run_job(_job(server), run_dir=tmp_path / "run", environ=environ)

    assert server.refused == [] and not [s for s in server.requests if s.path.endswith("/completions")]
    assert result.status == "error"
    assert "600 tokens" in result.error and server.url in result.error and "-c" in result.error
    assert read_record(result.run_dir).events[-1].error == result.error


async def test_the_jobs_context_size_is_used_when_the_server_does_not_say(tmp_path: Path) -> None:
    with OpenAIServer([], api_key="no-key") as server:
        resolved = resolve_model(spec_for("chat_completions", server), environ={})
        resolved.model.context.declared = 512
        with pytest.raises(ContextTooSmall) as caught:
            await resolved.model.context.fit("x" * 4000, [{"role": "user", "content": "hi"}], [], 64)
        await resolved.aclose()
    assert "512 tokens (the job's [model] context_size)" in caught.value.message
    assert "/api/show" in server.probes and "/props" in server.probes
