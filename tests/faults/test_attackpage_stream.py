"""Attack on streaming model replies (attackpage, 2026-12-06): a hostile OpenAI-compatible server.

A real HTTP server on 127.0.0.1 (`openai_server.Stream`) answers a run's streaming requests with
exactly the SSE bytes the test gives: a reply that stops in the middle without an error, bytes
that are not UTF-8, a connection dropped mid-body, a trickle past the deadline. The run goes
through the real `openai` client and the SDK's stream handler. What must hold: a half reply is
never recorded as the answer, every failure names the server, the deadline holds while a reply
streams, and the deltas reach listeners only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coderoom.jobs import build_job
from coderoom.record import read_record
from coderoom.record.events import Event, ModelCall, ModelStream
from coderoom.run import run_job
from openai_server import Fail, OpenAIServer, Stream, call, chunk, say, server_environ, spec_for

HEAD = chunk({"role": "assistant", "content": ""})
HALF = "The total revenue for March is"
WHOLE = "The total revenue for March is 4,200."


async def run(server: OpenAIServer, tmp_path: Path, heard: list[Event] | None = None, **environ: str) -> Any:
    job = build_job({"name": "stream-attack", "prompt": "Sum the revenue.", "model": spec_for("chat_completions", server),
                     "max_turns": 2})
    listeners = [heard.append] if heard is not None else []
    return await run_job(job, run_dir=tmp_path / "run", environ={"CODEROOM_MODEL_MAX_RETRIES": "1", **environ},
                         listeners=listeners)


def recorded_text(run_dir: Path) -> list[str]:
    return [item.text for e in read_record(run_dir).events if isinstance(e, ModelCall)
            for item in e.output if item.kind == "message"]


async def test_a_stream_that_ends_cleanly_mid_reply_is_asked_again_not_taken_as_the_answer(tmp_path: Path) -> None:
    """W-S01: the body ends (chunked, terminated) after half the reply: no finish_reason, no [DONE]."""
    heard: list[Event] = []
    cut = Stream((HEAD, chunk({"content": HALF})), end="eof")
    with OpenAIServer([cut, say(WHOLE)]) as server:
        result = await run(server, tmp_path, heard)
    assert not server.errors, server.errors
    assert result.status == "ok" and result.final_output == WHOLE, (result.status, result.final_output, result.error)
    assert recorded_text(result.run_dir) == [WHOLE]
    retries = [e for e in read_record(result.run_dir).events if e.type == "model_retry"]
    assert len(retries) == 1 and "ended before its reply" in retries[0].reason
    assert [bool(r.body.get("stream")) for r in server.requests] == [True, True]  # still streaming after it


async def test_a_server_that_keeps_cutting_its_stream_fails_the_run_with_no_half_answer(tmp_path: Path) -> None:
    cut = Stream((HEAD, chunk({"content": HALF})), end="eof")
    with OpenAIServer([cut, cut]) as server:
        result = await run(server, tmp_path)
    assert result.status != "ok" and HALF not in (result.final_output or "")
    assert "ended before its reply" in (result.error or "") and server.url in (result.error or ""), result.error
    assert recorded_text(result.run_dir) == []


async def test_with_retries_off_a_cut_stream_still_fails(tmp_path: Path) -> None:
    """W-S03: with no retries the SDK sends every request through `client.with_options(...)`, a
    copy of the client without coderoom's changes; before, the half reply was the answer."""
    with OpenAIServer([Stream((HEAD, chunk({"content": HALF})), end="eof")]) as server:
        result = await run(server, tmp_path, CODEROOM_MODEL_MAX_RETRIES="0")
    assert result.status != "ok" and "ended before its reply" in (result.error or ""), (result.status, result.error)
    assert recorded_text(result.run_dir) == []


async def test_a_reply_with_a_finish_reason_but_no_done_marker_is_whole(tmp_path: Path) -> None:
    whole = Stream((HEAD, chunk({"content": WHOLE}), chunk({}, "stop")), end="eof")
    with OpenAIServer([whole]) as server:
        result = await run(server, tmp_path)
    assert result.status == "ok" and result.final_output == WHOLE, result.error
    assert len(server.requests) == 1


async def test_a_connection_dropped_mid_stream_is_retried(tmp_path: Path) -> None:
    dropped = Stream((HEAD, chunk({"content": HALF})), end="drop")
    with OpenAIServer([dropped, say(WHOLE)]) as server:
        result = await run(server, tmp_path)
    assert result.status == "ok" and result.final_output == WHOLE, result.error
    assert recorded_text(result.run_dir) == [WHOLE]


async def test_bytes_that_are_not_utf8_in_a_stream_fail_the_run_naming_the_server(tmp_path: Path) -> None:
    """W-S02: before, the run ended with a bare UnicodeDecodeError that named no server."""
    bad = b'{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{"content":"ab\xff\xfe"},"finish_reason":null}]}'
    with OpenAIServer([Stream((HEAD, bad, chunk({}, "stop")))]) as server:
        result = await run(server, tmp_path)
    assert result.status != "ok"
    assert server.url in (result.error or "") and "not a valid completion" in (result.error or ""), result.error


async def test_a_stream_trickling_past_the_deadline_is_stopped_at_it(tmp_path: Path) -> None:
    heard: list[Event] = []
    trickle = Stream((HEAD, *[chunk({"content": "word "})] * 2000, chunk({}, "stop")), interval=0.05)
    with OpenAIServer([trickle]) as server:
        result = await run(server, tmp_path, heard, CODEROOM_MODEL_TIMEOUT="3", CODEROOM_MODEL_MAX_RETRIES="0")
    assert result.status != "ok" and "did not finish its answer within 3 s" in (result.error or ""), result.error
    assert any(isinstance(e, ModelStream) for e in heard)  # it was streaming when the deadline came
    assert "model_stream" not in (result.run_dir / "run.jsonl").read_text()


def assistant_contents(seen: Any) -> list[Any]:
    return [m.get("content") for m in seen.body["messages"] if m.get("role") == "assistant" and m.get("tool_calls")]


async def test_a_retried_request_and_one_with_retries_off_still_send_text_content(tmp_path: Path) -> None:
    """W-S03, its other face: `wire.with_text_content` ("" for a tool call's null content, which
    llama-cpp-python's server answers with HTTP 500) was lost on the SDK's copy of the client."""
    with OpenAIServer([call("exec_command", cmd="echo hi"), Fail(503), say("done")]) as server:
        retried = await run(server, tmp_path / "retried")
    with OpenAIServer([call("exec_command", cmd="echo hi"), say("done")]) as server_without:
        without = await run(server_without, tmp_path / "without", CODEROOM_MODEL_MAX_RETRIES="0")
    assert retried.status == "ok" and without.status == "ok", (retried.error, without.error)
    assert assistant_contents(server.requests[2]) == [""]  # the retry of the second request
    assert assistant_contents(server_without.requests[1]) == [""]


async def test_a_responses_stream_cut_before_its_completed_event_is_retried_and_streaming_stays_on(tmp_path: Path) -> None:
    """W-S05: before, such a stream counted as "the server does not stream": the request went
    again without streaming, unreported, and no later reply of the process streamed."""
    with OpenAIServer() as server:
        events = list(server.response_events({"model": "gpt-5.4", "input": "x"}, say(WHOLE)))
        began = [e for e in events if e["type"] in ("response.created", "response.output_item.added",
                                                    "response.content_part.added", "response.output_text.delta")]
        server.script([Stream(tuple(began), end="eof"), say(WHOLE)])
        job = build_job({"name": "stream-attack", "prompt": "Sum the revenue.", "model": "gpt-5.4", "max_turns": 2})
        result = await run_job(job, run_dir=tmp_path / "run", environ=server_environ(server, CODEROOM_MODEL_MAX_RETRIES="1"))
    assert not server.errors, server.errors
    assert result.status == "ok" and result.final_output == WHOLE, result.error
    assert [bool(r.body.get("stream")) for r in server.requests] == [True, True]
    assert [e.type for e in read_record(result.run_dir).events].count("model_retry") == 1


def capped_job(server: OpenAIServer, max_tokens: int) -> Any:
    return build_job({"name": "stream-attack", "prompt": "Sum the revenue.", "max_turns": 1,
                      "model": {"spec": spec_for("chat_completions", server), "max_tokens": max_tokens}})


async def test_a_stream_far_past_max_tokens_is_not_read_to_its_end(tmp_path: Path) -> None:
    """W-S06: a server that ignores max_tokens streamed one-character deltas up to the 32 MiB answer
    bound; each costs the host a pydantic parse (100,000 took 15 s of CPU, 40x the same text as one
    answer). Past twice the cap (and a slack) the reply is refused, not retried."""
    flood = Stream((HEAD, *[chunk({"content": "a"})] * 20_000, chunk({}, "stop")))
    with OpenAIServer([flood, flood]) as server:
        result = await run_job(capped_job(server, 100), run_dir=tmp_path / "run",
                               environ={"CODEROOM_MODEL_MAX_RETRIES": "1"})
    assert result.status != "ok" and "does not honour max_tokens" in (result.error or ""), result.error
    assert server.url in (result.error or "") and len(server.requests) == 1  # not asked again
    assert recorded_text(result.run_dir) == []


async def test_a_stream_of_exactly_max_tokens_deltas_is_a_reply(tmp_path: Path) -> None:
    whole = Stream((HEAD, *[chunk({"content": "a"})] * 100, chunk({}, "length")))
    with OpenAIServer([whole, say("done.")]) as server:
        result = await run_job(capped_job(server, 100), run_dir=tmp_path / "run",
                               environ={"CODEROOM_MODEL_MAX_RETRIES": "1"})
    assert result.status == "ok", result.error


async def test_negative_usage_from_the_server_is_recorded_as_zero(tmp_path: Path) -> None:
    """W-S10: the record kept -10^12 output tokens as the server said, and the run's totals with it."""
    lying = {"prompt_tokens": -5, "completion_tokens": -10**12, "total_tokens": -7}
    with OpenAIServer([Stream((HEAD, chunk({"content": WHOLE}), chunk({}, "stop"), chunk(None, usage=lying)))]) as server:
        result = await run(server, tmp_path)
    assert result.status == "ok", result.error
    events = read_record(result.run_dir).events
    (call_event,) = [e for e in events if isinstance(e, ModelCall)]
    usage = call_event.usage
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (0, 0, 0) and usage.requests == 1
    assert events[-1].usage.total_tokens == 0  # run_end's sum
