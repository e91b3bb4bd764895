"""A run's model replies stream to its listeners (the CLI's progress, the page) as they arrive:
`model_stream` events with the tokens so far, their rate and the new text, never written to the
record, which keeps the final reply as before. A server that does not stream is asked again
without streaming, once, and the run goes on as before it streamed.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from agents import ModelSettings, ModelTracing
from rich.console import Console

from coderoom.cli.progress import Progress
from coderoom.jobs import build_job
from coderoom.models.resolve import resolve_model
from coderoom.record import read_record
from coderoom.record.events import Event, ModelCall, ModelStream, ModelStreamOff
from coderoom.record.notes import run_notes
from coderoom.run import run_job
from llama_server import LlamaServer
from openai_server import Fail, OpenAIServer, Trickle, call, say, spec_for

LONG_ANSWER = "The file has three rows and two columns, month and revenue, and nothing else in it."


def job_for(spec: str, tmp_path: Path, **extra: Any) -> Any:
    return build_job({"name": "streamed", "prompt": "Say what is in the workspace.", "model": spec, "max_turns": 3,
                      **extra})


async def test_a_real_llama_server_streams_tokens_with_their_rate_and_the_record_keeps_the_reply(
    llama: LlamaServer, tmp_path: Path
) -> None:
    heard: list[Event] = []
    shown = io.StringIO()
    progress = Progress(Console(file=shown, width=200, color_system=None))
    lines: list[str] = []

    def listen(event: Event) -> None:
        heard.append(event)
        progress(event)
        if isinstance(event, ModelStream):
            lines.append(progress.line().plain)

    job = job_for({"spec": llama.spec, "max_tokens": 16, "temperature": 0, "tool_choice": "none"}, tmp_path,
                  prompt="Write three sentences about the sea.", max_turns=1)
    environ = {**os.environ, "CODEROOM_MODEL_MAX_RETRIES": "0", "CODEROOM_MODEL_TIMEOUT": "600"}

    result = await run_job(job, run_dir=tmp_path / "run", environ=environ, listeners=[listen])

    streamed = [e for e in heard if isinstance(e, ModelStream)]
    calls = [e for e in heard if isinstance(e, ModelCall)]
    assert streamed and calls, (result.error, [e.type for e in heard])
    # one stream a request (a reply cut at max_tokens is continued by a second one): each count grows
    streams: list[list[ModelStream]] = []
    for event in streamed:
        if not streams or event.tokens <= streams[-1][-1].tokens:
            streams.append([])
        streams[-1].append(event)
    assert len(streams) <= 2 and all(len(s) > 1 and s[0].tokens == 1 for s in streams), [e.tokens for e in streamed]
    assert any(e.rate is not None and e.rate > 0 for e in streamed)
    # each delta is a token on llama.cpp: the last counts are the reply's own output tokens
    assert sum(s[-1].tokens for s in streams) == calls[0].usage.output_tokens
    text = "".join(e.text for e in streams[-1])
    first = calls[0].output[0]
    assert first.kind == "message" and text and first.text.startswith(text[:20])
    assert any("receiving the reply: " in line and "tokens/s" in line for line in lines), lines
    # the record holds the reply, not the deltas
    recorded = [e.type for e in read_record(result.run_dir).events]
    assert "model_stream" not in recorded and recorded.count("model_call") == len(calls)


async def test_streamed_text_adds_up_to_the_reply(tmp_path: Path) -> None:
    heard: list[Event] = []
    with OpenAIServer([Trickle(say(LONG_ANSWER), interval=0.01)]) as server:
        result = await run_job(job_for(spec_for("chat_completions", server), tmp_path), run_dir=tmp_path / "run",
                               environ={"CODEROOM_MODEL_MAX_RETRIES": "0"}, listeners=[heard.append])
    assert not server.errors, server.errors
    assert result.final_output == LONG_ANSWER
    assert server.requests[0].body.get("stream") is True
    assert server.requests[0].body.get("stream_options") == {"include_usage": True}
    streamed = [e for e in heard if isinstance(e, ModelStream)]
    assert "".join(e.text for e in streamed) == LONG_ANSWER
    assert streamed[-1].tokens == len(LONG_ANSWER.split())


async def test_a_server_that_does_not_stream_is_asked_once_more_without_and_the_run_goes_on(tmp_path: Path) -> None:
    heard: list[Event] = []
    script = [say("first answer, as plain JSON"), call("exec_command", cmd="echo hi"), say("done.")]
    with OpenAIServer(script, streams=False) as server:
        result = await run_job(job_for(spec_for("chat_completions", server), tmp_path), run_dir=tmp_path / "run",
                               environ={"CODEROOM_MODEL_MAX_RETRIES": "0"}, listeners=[heard.append])
    assert not server.errors, server.errors
    # the first request asked for a stream and got JSON, which carried none: asked again, then never
    # asked to stream again
    assert [bool(r.body.get("stream")) for r in server.requests] == [True, False, False]
    assert result.status == "ok" and result.final_output == "done."
    assert not [e for e in heard if isinstance(e, ModelStream)]
    calls = [e for e in read_record(result.run_dir).events if isinstance(e, ModelCall)]
    assert len(calls) == 2 and calls[0].usage.requests == 1


async def test_a_server_that_refuses_a_streaming_request_is_asked_once_without_and_never_to_stream_again(
    tmp_path: Path,
) -> None:
    heard: list[Event] = []
    script = [call("exec_command", cmd="echo hi"), say("done.")]
    with OpenAIServer(script, refuses_stream=400) as server:
        result = await run_job(job_for(spec_for("chat_completions", server), tmp_path), run_dir=tmp_path / "run",
                               environ={"CODEROOM_MODEL_MAX_RETRIES": "0"}, listeners=[heard.append])
    assert not server.errors, server.errors
    sent = [(bool(r.body.get("stream")), "stream_options" in r.body) for r in server.requests]
    assert sent == [(True, True), (False, False), (False, False)]  # refused, asked again without, then only so
    assert result.status == "ok" and result.final_output == "done."
    off = [e for e in read_record(result.run_dir).events if isinstance(e, ModelStreamOff)]
    assert [(e.status, e.reason) for e in off] == [(400, "stream is not supported")]  # once
    assert "the model server does not stream (HTTP 400: stream is not supported)" in " ".join(run_notes(read_record(result.run_dir).events))


async def test_a_refusal_that_is_not_about_streaming_is_the_server_s_error_and_is_not_retried_again(
    tmp_path: Path,
) -> None:
    with OpenAIServer([Fail(400, "the prompt is not valid")], refuses_stream=400) as server:
        result = await run_job(job_for(spec_for("chat_completions", server), tmp_path), run_dir=tmp_path / "run",
                               environ={"CODEROOM_MODEL_MAX_RETRIES": "0"})
    assert [bool(r.body.get("stream")) for r in server.requests] == [True, False]  # one retry, no loop
    assert result.status == "error" and "the prompt is not valid" in (result.error or "")
    assert not [e for e in read_record(result.run_dir).events if isinstance(e, ModelStreamOff)]


async def test_a_server_error_to_a_streaming_request_is_not_taken_for_a_refusal_to_stream(tmp_path: Path) -> None:
    with OpenAIServer([], refuses_stream=401) as server:
        result = await run_job(job_for(spec_for("chat_completions", server), tmp_path), run_dir=tmp_path / "run",
                               environ={"CODEROOM_MODEL_MAX_RETRIES": "0"})
    assert [bool(r.body.get("stream")) for r in server.requests] == [True]
    assert result.status == "error"


async def ask(model: Any) -> Any:
    return await model.get_response(None, "hi", ModelSettings(), [], None, [], ModelTracing.DISABLED,
                                    previous_response_id=None, conversation_id=None, prompt=None)  # fmt: skip


async def test_every_later_run_of_a_model_that_does_not_stream_records_why_once() -> None:
    """E-R15: streaming stays off for the resolved model (every run `agent_model` makes of it shares
    that), so each later run, which never asks for a stream, records the first run's reason, once, as
    that run did: a long-lived process's later runs say why they did not stream."""
    heard: dict[str, list[tuple[str, dict[str, Any]]]] = {"first": [], "later": []}
    with OpenAIServer([say("one"), say("two"), say("three"), say("four")], refuses_stream=400) as server:
        resolved = resolve_model(spec_for("chat_completions", server), environ={"CODEROOM_MODEL_MAX_RETRIES": "0"})
        try:
            runs = {name: resolved.agent_model(lambda kind, _n=name, **fields: heard[_n].append((kind, fields)), None)
                    for name in heard}  # fmt: skip
            for name in heard:  # two requests a run
                await ask(runs[name])
                await ask(runs[name])
        finally:
            await resolved.aclose()
    assert not server.errors, server.errors
    assert [bool(r.body.get("stream")) for r in server.requests] == [True, False, False, False, False]
    off = {name: [f for kind, f in said if kind == "model_stream_off"] for name, said in heard.items()}
    assert off["first"] == off["later"] == [{"status": 400, "reason": "stream is not supported"}]  # once a run, the same words
