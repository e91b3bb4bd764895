"""Every Chat Completions request carries a cap on its output tokens, so a local model that does
not stop cannot generate until its context or the request deadline is full: the job's
max_tokens when set, else CODEROOM_MODEL_MAX_TOKENS, else a quarter of the context the server
reports (at most DEFAULT_MAX_TOKENS), else DEFAULT_MAX_TOKENS. Checked on the requests the
scripted loopback server received."""

from __future__ import annotations

from typing import Any

import pytest

from adder import run_agent
from coderoom.errors import ModelSpecError
from coderoom.models import resolve_model
from coderoom.models.options import ModelOptions
from coderoom.models.output_cap import DEFAULT_MAX_TOKENS, reply_cap
from openai_server import SERVER_KEY, OpenAIServer, call, say, server_environ, spec_for


def _caps(server: OpenAIServer, key: str = "max_tokens") -> list[Any]:
    return [seen.body.get(key) for seen in server.requests if seen.path.endswith(("/completions", "/responses"))]


async def _run(server: OpenAIServer, api: str = "chat_completions", options: ModelOptions | None = None,
               **environ: str) -> None:
    server.script([call("add", a=2, b=3), say("5")])
    resolved = resolve_model(spec_for(api, server), environ=server_environ(server, **environ))
    await run_agent(resolved, options=options)


async def test_a_llama_cpp_server_gets_a_quarter_of_its_context_per_reply() -> None:
    with OpenAIServer(api_key=SERVER_KEY, n_ctx=2048) as server:
        await _run(server)
    assert _caps(server) == [512, 512]


async def test_a_server_that_does_not_say_its_context_gets_the_documented_default(
    openai_server: OpenAIServer,
) -> None:
    await _run(openai_server)
    assert _caps(openai_server) == [DEFAULT_MAX_TOKENS, DEFAULT_MAX_TOKENS]


async def test_a_large_context_is_capped_at_the_default() -> None:
    assert reply_cap(8192) == reply_cap(131072) == DEFAULT_MAX_TOKENS == 1024
    assert reply_cap(2048) == 512


async def test_the_environment_variable_overrides_the_derived_cap() -> None:
    with OpenAIServer(api_key=SERVER_KEY, n_ctx=2048) as server:
        await _run(server, CODEROOM_MODEL_MAX_TOKENS="300")
    assert _caps(server) == [300, 300]


async def test_the_jobs_max_tokens_wins_over_the_variable(openai_server: OpenAIServer) -> None:
    await _run(openai_server, options=ModelOptions(max_tokens=77), CODEROOM_MODEL_MAX_TOKENS="300")
    assert _caps(openai_server) == [77, 77]


async def test_the_responses_api_is_capped_only_when_asked(openai_server: OpenAIServer) -> None:
    await _run(openai_server, api="responses")
    assert _caps(openai_server, "max_output_tokens") == [None, None]
    openai_server.requests.clear()
    await _run(openai_server, api="responses", CODEROOM_MODEL_MAX_TOKENS="300")
    assert _caps(openai_server, "max_output_tokens") == [300, 300]


@pytest.mark.parametrize("raw", ["0", "many", "-5", "2000000"])
def test_a_bad_variable_is_a_usage_error_naming_it(raw: str) -> None:
    with pytest.raises(ModelSpecError, match="CODEROOM_MODEL_MAX_TOKENS"):
        resolve_model("openai-compatible:m@http://127.0.0.1:9/v1", environ={"CODEROOM_MODEL_MAX_TOKENS": raw})
