"""`coderoom models check` against the loopback server (each check passing and failing, through the
real `openai` client) and against a real llama-server (which, with SmolLM2, ignores both ways of
forcing a tool call: the check must say so and exit 1)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from coderoom.cli import app
from llama_server import LlamaServer
from openai_server import Call, OpenAIServer, Reply, call, say, spec_for


def check(spec: str, **environ: str) -> tuple[int, str]:
    env = {**os.environ, "CODEROOM_MODEL_MAX_RETRIES": "0", "COLUMNS": "200", **environ}
    result = CliRunner().invoke(app, ["models", "check", spec], env=env)
    return result.exit_code, result.output


def test_a_server_that_does_everything_passes() -> None:
    with OpenAIServer([call("record_number", number=7), say("ok")], n_ctx=4096, models=["scripted"]) as server:
        code, output = check(spec_for("chat_completions", server))
        sent = [seen.body for seen in server.requests]

    assert code == 0, output
    assert "model listed" in output and "4,096 tokens" in output and "/props" in output
    assert "tool_choice named: ok" in output and "no (llama.cpp says)" in output
    assert sent[0]["tool_choice"] == {"type": "function", "function": {"name": "record_number"}}
    assert sent[1]["messages"][-1] == {"role": "tool", "tool_call_id": sent[1]["messages"][1]["tool_calls"][0]["id"], "content": "recorded"}


def test_a_server_that_ignores_forcing_fails_and_says_how() -> None:
    script = [say("I would rather \x1b]52;c;Zm9v\x07talk."), say("Still talking.")]
    with OpenAIServer(script, models=["scripted"]) as server:
        code, output = check(spec_for("chat_completions", server), CODEROOM_MODEL_IMAGES="1")

    assert code == 1
    assert "tool_choice named: ignored (answered in prose" in output
    assert "tool_choice required: ignored (answered in prose" in output
    assert "\x1b]52" not in output and "\x07" not in output  # the server's text is escaped
    assert "the server does not say" in output and "yes (CODEROOM_MODEL_IMAGES)" in output


def test_a_call_to_another_tool_or_bad_arguments_fail() -> None:
    script = [call("rm_rf"), Reply(calls=(Call("record_number", "{nope"),))]
    with OpenAIServer(script) as server:
        code, output = check(spec_for("chat_completions", server))

    assert code == 1
    assert "called 'rm_rf', not record_number" in output and "arguments are not a JSON object" in output
    assert "has no /models list" in output


def test_a_model_the_server_does_not_list_fails() -> None:
    with OpenAIServer([], models=["llama3", "qwen2.5"]) as server:
        code, output = check(f"openai-compatible:nope@{server.url}")
    assert code == 1 and "'nope' is not among the server's models: llama3, qwen2.5" in output


def test_an_unreachable_server_and_a_bad_spec() -> None:
    with OpenAIServer([]) as server:
        url = server.url
    code, output = check(f"openai-compatible:x@{url}")
    assert code == 1 and "cannot reach the model server" in output and "FAIL" in output
    code, output = check("openai-compatible:nothing-after-the-name")
    assert code == 2 and "expected openai-compatible:MODEL@BASE_URL" in output


def test_against_llama_server(llama: LlamaServer) -> None:
    code, output = check(llama.spec)
    assert "reachable" in output and f"{llama.n_ctx:,} tokens ({llama.root}/props)" in output
    assert "no (llama.cpp says)" in output
    # SmolLM2 on this llama.cpp build answers in prose whatever tool_choice says: reported, exit 1
    assert ("tool_choice named: ok" in output) == (code == 0), output
    print(output)
