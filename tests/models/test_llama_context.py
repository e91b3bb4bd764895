"""The context window against a real llama-server started with `-c 2048`: coderoom reads the size
from /props, counts with /tokenize, and a history of large tool outputs that the server refuses
as it is (400 "exceeds the available context size") is trimmed and accepted."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import ModelSettings, ModelTracing

from coderoom.agent import base_instructions
from coderoom.models import resolve_model
from llama_server import LlamaServer, start_llama, stop_llama

N_CTX = 2048
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def llama_2k(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    running = start_llama(tmp_path_factory.mktemp("llama2k") / "llama-server.log", n_ctx=N_CTX)
    try:
        yield running
    finally:
        stop_llama(running)


def _history(outputs: int) -> list[Any]:
    items: list[Any] = [{"role": "user", "content": "Look at input/data.csv and summarise it."}]
    for n in range(outputs):
        rows = "".join(f"2024-01-{n + 1:02d}T{h:02d}:00:00,{10 + h * 0.37:.3f}\n" for h in range(24))
        items += [
            {"type": "function_call", "call_id": f"c{n}", "name": "exec_command", "arguments": '{"cmd": "cat input/data.csv"}'},
            {"type": "function_call_output", "call_id": f"c{n}", "output": "timestamp,kwh\n" + rows * 2},
        ]
    return items


async def test_a_history_too_long_for_the_server_is_trimmed_and_accepted(llama_2k: LlamaServer) -> None:
    history = _history(6)
    resolved = resolve_model(llama_2k.spec, environ={"CODEROOM_MODEL_MAX_RETRIES": "0"})
    events: list[tuple[str, dict[str, Any]]] = []
    resolved.model.notify = lambda kind, **fields: events.append((kind, fields))
    settings = ModelSettings(max_tokens=MAX_TOKENS)
    client = openai.AsyncOpenAI(base_url=llama_2k.url, api_key="no-key", max_retries=0)
    untrimmed = [{"role": "system", "content": base_instructions(resolved)}]
    for item in history:
        if item.get("role"):
            untrimmed.append(item)
        elif item["type"] == "function_call":
            call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
            untrimmed.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            untrimmed.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
    try:
        # the server really refuses the history as it is
        with pytest.raises(openai.BadRequestError, match="exceeds the available context size"):
            await client.chat.completions.create(model="smollm2", messages=untrimmed, max_tokens=MAX_TOKENS)
        response = await resolved.model.get_response(
            base_instructions(resolved), history, settings, [], None, [],
            ModelTracing.DISABLED, previous_response_id=None, conversation_id=None, prompt=None,
        )  # fmt: skip
    finally:
        await client.close()
        await resolved.aclose()

    # a reply cut at MAX_TOKENS is continued once: each request is fitted on its own
    entries = response.usage.request_usage_entries
    assert entries and all(entry.input_tokens + MAX_TOKENS <= N_CTX for entry in entries)
    trims = [fields for kind, fields in events if kind == "context_trimmed"]
    assert trims and trims[0]["context_size"] == N_CTX
    assert trims[0]["source"] == f"{llama_2k.root}/props" and trims[0]["method"] == "llama.cpp /tokenize"
    assert trims[0]["tokens_before"] > N_CTX >= trims[0]["tokens_after"]
    # the server's own count of what it was sent is within what coderoom counted
    assert entries[0].input_tokens <= trims[0]["tokens_after"]
    print("trims:", trims, "server counts:", [entry.input_tokens for entry in entries])
