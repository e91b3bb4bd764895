"""Model request faults, each against the scripted loopback server through the real client.

A trickling server cannot hold a request past its whole-request deadline; a Retry-After wait is
bounded and reported; a request the server says is wrong is not sent again; an answer that is
not a completion is explained naming the server; a reply cut by max_tokens is never taken
silently as the final answer.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from adder import run_agent
from coderoom.models import explain_model_error, resolve_model
from coderoom.models.failures import ModelAnswerError, ModelDeadlineExceeded
from coderoom.models.guard import CUT_NOTE
from coderoom.models.options import ModelOptions
from coderoom.models.settings import RETRY_AFTER_CAP_S
from openai_server import Fail, OpenAIServer, Raw, Reply, Trickle, call, say, server_environ, spec_for

APIS = ["chat_completions", "responses"]


def resolved(server: OpenAIServer, api: str = "chat_completions", **environ: str) -> Any:
    return resolve_model(spec_for(api, server), environ=server_environ(server, **environ))


@pytest.mark.parametrize("api", APIS)
async def test_a_trickling_server_is_cut_off_at_the_whole_request_deadline(
    openai_server: OpenAIServer, api: str
) -> None:
    openai_server.script([Trickle(say("slow"), interval=0.2)])
    model = resolved(openai_server, api, CODEROOM_MODEL_TIMEOUT="1", CODEROOM_MODEL_MAX_RETRIES="0")
    started = time.monotonic()

    with pytest.raises(ModelDeadlineExceeded) as caught:
        await run_agent(model)

    assert time.monotonic() - started < 3, "a per-read timeout alone would wait for every byte"
    assert openai_server.url in caught.value.message and "within 1 s" in caught.value.message


async def test_retry_after_is_honoured_up_to_a_bound_and_reported(openai_server: OpenAIServer) -> None:
    openai_server.script([Fail(429, "slow down", headers={"retry-after": "0.2"}), say("done")])
    events: list[tuple[str, dict[str, Any]]] = []

    result = await run_agent(resolved(openai_server), events=events)

    assert result.final_output == "done"
    ((kind, retry),) = events
    assert kind == "model_retry"
    assert (retry["status"], retry["retry_after"], retry["wait_s"]) == (429, 0.2, 0.2)
    assert retry["reason"].endswith("slow down")


def test_a_long_retry_after_is_capped() -> None:
    from agents.retry import ModelRetryNormalizedError, RetryPolicyContext

    from coderoom.models.settings import retry_policy

    seen: list[dict[str, Any]] = []
    policy = retry_policy(lambda kind, **fields: seen.append(fields))
    error = ModelRetryNormalizedError(status_code=429, message="busy", retry_after=3600.0)
    decision = policy(RetryPolicyContext(error=RuntimeError("429"), attempt=1, max_retries=3,
                                         stream=False, normalized=error))
    assert decision.retry and decision.delay == RETRY_AFTER_CAP_S == seen[0]["wait_s"]
    assert seen[0]["retry_after"] == 3600.0


@pytest.mark.parametrize(
    "failure",
    [
        Fail(400, "Invalid 'messages[2].tool_calls'"),
        Fail(413, "request entity too large"),
        Fail(422, "unprocessable"),
        Fail(500, "the request (5120 tokens) exceeds the available context size (4096 tokens), try increasing it"),
        Fail(500, "Failed to parse tool call arguments as JSON: parse error at line 1"),
    ],
    ids=["400", "413", "422", "500-context", "500-tool-args"],
)
async def test_a_request_the_server_calls_wrong_is_not_retried(
    openai_server: OpenAIServer, failure: Fail
) -> None:
    openai_server.script([failure])

    with pytest.raises(Exception) as caught:
        await run_agent(resolved(openai_server))

    assert len(openai_server.requests) == 1
    message = explain_model_error(caught.value)
    assert message is not None and openai_server.url in message and failure.message in message
    assert f"HTTP {failure.status}" in message or f"({failure.status})" in message


@pytest.mark.parametrize(
    ("body", "content_type", "detail"),
    [
        (b'{"id": "x", "choices": [', "application/json", "JSONDecodeError"),
        (b"<html><body>502 Bad Gateway</body></html>", "text/html", "not a valid completion"),
        (b'{"id": "x", "object": "chat.completion", "choices": []}', "application/json", "no choices"),
    ],
    ids=["malformed-json", "not-json", "empty-choices"],
)
async def test_an_answer_that_is_not_a_completion_names_the_server(
    openai_server: OpenAIServer, body: bytes, content_type: str, detail: str
) -> None:
    openai_server.script([Raw(body, content_type=content_type)])

    with pytest.raises(ModelAnswerError) as caught:
        await run_agent(resolved(openai_server, CODEROOM_MODEL_MAX_RETRIES="0"))

    message = explain_model_error(caught.value)
    assert message is not None and message.startswith(f"the model server at {openai_server.url}")
    assert detail in message and "not a valid completion" in message


@pytest.mark.parametrize("api", APIS)
async def test_a_reply_cut_by_max_tokens_is_continued_once(openai_server: OpenAIServer, api: str) -> None:
    openai_server.script([Reply(text="The sum is", cut=True), say("5.")])
    events: list[tuple[str, dict[str, Any]]] = []

    result = await run_agent(resolved(openai_server, api), options=ModelOptions(max_tokens=50), events=events)

    assert result.final_output == "5."
    assert events == [("model_reply_cut", {"max_tokens": 50, "retried": True})]
    assert "cut off at the output token limit" in str(openai_server.requests[1].body)


async def test_a_reply_cut_twice_is_marked_for_the_user(openai_server: OpenAIServer) -> None:
    openai_server.script([Reply(text="The sum", cut=True), Reply(text="is", cut=True)])
    events: list[tuple[str, dict[str, Any]]] = []

    result = await run_agent(resolved(openai_server), options=ModelOptions(max_tokens=50), events=events)

    assert result.final_output == f"is\n\n{CUT_NOTE}"
    assert [fields["retried"] for _, fields in events] == [True, False]


async def test_an_answer_over_the_size_bound_is_not_read_further(openai_server: OpenAIServer) -> None:
    """Attack B07: one 150 MiB completion kept the CLI busy for minutes at 1.6 GB. Reading stops
    at MAX_RESPONSE_BYTES, and the error names the limit."""
    import json
    import resource

    from coderoom.models.transport import MAX_RESPONSE_BYTES

    text = "a" * (MAX_RESPONSE_BYTES + 1024**2)
    body = json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}).encode()
    openai_server.script([Raw(body)])
    del text, body
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(Exception) as caught:
        await run_agent(resolved(openai_server, CODEROOM_MODEL_MAX_RETRIES="0"))
    assert "MAX_RESPONSE_BYTES" in (explain_model_error(caught.value) or str(caught.value))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 3 * MAX_RESPONSE_BYTES / 1024**2  # never the whole answer, parsed
