"""The real `openai` client and the SDK's own models and Runner against the scripted server.

Round trips in both wire formats (plain and streamed), retries done by the SDK's runner with
coderoom's policy (429, 5xx; a refused connection once, quickly; never a request past its
deadline), a bad key stopping at once, and the one-line
explanations the runner shows.
"""

from __future__ import annotations

import json
import socket
import time

import httpx2 as httpx
import openai
import pytest
from adder import run_agent
from coderoom.models import explain_model_error, resolve_model
from coderoom.models.failures import ModelDeadlineExceeded
from openai_server import SERVER_KEY, Fail, OpenAIServer, Stall, call, say, server_environ, spec_for

APIS = ["chat_completions", "responses"]
FAST = {"retry-after-ms": "10"}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", APIS)
async def test_tool_call_round_trip(openai_server: OpenAIServer, api: str, stream: bool) -> None:
    openai_server.script([call("add", a=2, b=3), say("2 + 3 = 5")])
    resolved = resolve_model(spec_for(api, openai_server), environ=server_environ(openai_server))
    assert resolved.api == api

    result = await run_agent(resolved, stream=stream)

    assert result.final_output == "2 + 3 = 5"
    path = "/v1/chat/completions" if api == "chat_completions" else "/v1/responses"
    assert openai_server.paths() == [path, path]
    first, second = openai_server.requests
    assert first.body["model"] in ("scripted", "gpt-5.4")
    assert first.body.get("stream", False) is stream
    assert first.tool_names == ["add"]
    assert all(tool["type"] == "function" for tool in first.body["tools"])
    assert first.tool_outputs == [] and second.tool_outputs == ["5"]
    assert first.headers["authorization"] == f"Bearer {SERVER_KEY}"
    usage = result.context_wrapper.usage
    assert usage.requests == 2 and usage.input_tokens > 0 and usage.output_tokens > 0


@pytest.mark.parametrize("api", APIS)
async def test_rate_limit_and_server_errors_are_retried(
    openai_server: OpenAIServer, api: str
) -> None:
    openai_server.script([Fail(429, "Rate limit reached", headers=FAST), Fail(500), say("done")])
    resolved = resolve_model(spec_for(api, openai_server), environ=server_environ(openai_server))

    result = await run_agent(resolved)

    assert result.final_output == "done"
    assert len(openai_server.requests) == 3
    bodies = [json.dumps(seen.body, sort_keys=True) for seen in openai_server.requests]
    assert len(set(bodies)) == 1, "a retry must resend the same request"


@pytest.mark.parametrize("api", APIS)
async def test_bad_key_stops_at_once(openai_server: OpenAIServer, api: str) -> None:
    environ = server_environ(
        openai_server, OPENAI_API_KEY="sk-wrong-key", OPENAI_COMPATIBLE_API_KEY="sk-wrong-key"
    )
    resolved = resolve_model(spec_for(api, openai_server), environ=environ)

    with pytest.raises(openai.AuthenticationError) as caught:
        await run_agent(resolved)

    assert len(openai_server.requests) == 1
    message = explain_model_error(caught.value)
    assert message is not None and "rejected the API key (401)" in message
    assert openai_server.url in message and "sk-wrong-key" not in message


@pytest.mark.parametrize("api", APIS)
async def test_a_request_that_runs_into_its_deadline_is_not_sent_again(
    openai_server: OpenAIServer, api: str
) -> None:
    """A server still generating when the deadline passes would generate again: one local model
    spent 50 minutes on one turn, resending a 600 s request five times."""
    openai_server.script([Stall(30), say("never asked")])
    environ = server_environ(openai_server, CODEROOM_MODEL_TIMEOUT="0.5")
    resolved = resolve_model(spec_for(api, openai_server), environ=environ)
    events: list[tuple[str, dict[str, object]]] = []
    started = time.monotonic()

    with pytest.raises(ModelDeadlineExceeded) as caught:
        await run_agent(resolved, events=events)

    assert time.monotonic() - started < 5
    assert len(openai_server.requests) == 1 and events == []
    assert explain_model_error(caught.value) == (
        f"the model server at {openai_server.url} did not finish its answer within 0.5 s; "
        "not retried (the same request would take as long): raise CODEROOM_MODEL_TIMEOUT if the "
        "server is just slow, or lower --max-tokens"
    )


async def test_a_read_timeout_of_the_client_is_not_retried_either() -> None:
    from agents.retry import ModelRetryNormalizedError, RetryPolicyContext

    from coderoom.models.settings import retry_policy

    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    error = openai.APITimeoutError(request=request)
    error.__cause__ = httpx.ReadTimeout("timed out", request=request)
    normalized = ModelRetryNormalizedError(is_network_error=True, is_timeout=True, message=str(error))
    decision = retry_policy(lambda *_a, **_f: None)(
        RetryPolicyContext(error=error, attempt=1, max_retries=5, stream=False, normalized=normalized)
    )
    assert not decision.retry


async def test_rate_limit_exhausted_is_explained(openai_server: OpenAIServer) -> None:
    openai_server.script([Fail(429, "Rate limit reached for requests", headers=FAST)] * 3)
    environ = server_environ(openai_server, CODEROOM_MODEL_MAX_RETRIES="2")
    resolved = resolve_model(spec_for("responses", openai_server), environ=environ)

    with pytest.raises(openai.RateLimitError) as caught:
        await run_agent(resolved)

    assert len(openai_server.requests) == 3
    message = explain_model_error(caught.value)
    assert message is not None
    assert "still rate-limited" in message and "Rate limit reached for requests" in message


async def test_unknown_model_is_explained_without_retrying(openai_server: OpenAIServer) -> None:
    openai_server.script(
        [Fail(404, 'model "scripted" not found, try pulling it first', code="model_not_found")]
    )
    resolved = resolve_model(
        spec_for("chat_completions", openai_server), environ=server_environ(openai_server)
    )

    with pytest.raises(openai.NotFoundError) as caught:
        await run_agent(resolved)

    assert len(openai_server.requests) == 1
    message = explain_model_error(caught.value)
    assert message is not None and message.startswith("model 'scripted' was not found at")
    assert "try pulling it first" in message


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("api", APIS)
async def test_a_refused_connection_fails_after_one_quick_retry(api: str) -> None:
    """Not 1+2+4+8+16 s of backoff: a server that is not listening will not be in 30 s."""
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    spec = f"openai-compatible:m@{url}" if api == "chat_completions" else "gpt-5.4"
    environ = {"CODEROOM_MODEL_MAX_RETRIES": "5", "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": url}
    resolved = resolve_model(spec, environ=environ)
    events: list[tuple[str, dict[str, object]]] = []
    started = time.monotonic()

    with pytest.raises(openai.APIConnectionError) as caught:
        await run_agent(resolved, events=events)

    assert time.monotonic() - started < 3
    assert [(kind, fields["attempt"], fields["wait_s"]) for kind, fields in events] == [("model_retry", 1, 0.5)]
    try:
        raise RuntimeError("run failed") from caught.value
    except RuntimeError as wrapped:
        message = explain_model_error(wrapped)
    path = "chat/completions" if api == "chat_completions" else "responses"
    assert message is not None and message.startswith(f"cannot reach the model server at {url}/{path}: ")
    assert message.endswith("; is it running, and is the URL right?")


def test_other_errors_are_not_model_errors() -> None:
    assert explain_model_error(ValueError("bad job")) is None
    assert explain_model_error(ExceptionGroup("many", [KeyError("x")])) is None


async def test_compatible_server_never_gets_host_openai_credentials(
    openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_server.api_key = None  # this server, like Ollama, takes any key
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-host-key")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-canary")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-canary")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "Authorization: Bearer sk-canary-custom-header")
    openai_server.script([say("hi")])
    resolved = resolve_model(f"openai-compatible:m@{openai_server.url}", environ=None)

    await run_agent(resolved)

    (seen,) = openai_server.requests
    assert seen.headers["authorization"] == "Bearer no-key"
    assert "canary" not in json.dumps(seen.headers) + json.dumps(seen.body)


async def test_an_assistant_turn_of_tool_calls_goes_out_with_text_content(openai_server: OpenAIServer) -> None:
    """llama-cpp-python's server answers HTTP 500 to `"content": null` on the assistant message
    of a tool call (valid OpenAI form); coderoom sends "" instead."""
    openai_server.script([call("add", a=2, b=3), say("5")])
    resolved = resolve_model(spec_for("chat_completions", openai_server), environ=server_environ(openai_server))
    await run_agent(resolved)
    second = openai_server.requests[1].body["messages"]
    calls = [m for m in second if m.get("role") == "assistant" and m.get("tool_calls")]
    assert calls and all(m.get("content") == "" for m in calls), calls
