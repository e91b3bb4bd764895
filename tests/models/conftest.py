"""Fixtures for the model layer: a scripted OpenAI-speaking server and a real llama-server, both on
127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import set_tracing_disabled

from llama_server import LlamaServer, start_llama, stop_llama
from openai_server import SERVER_KEY, OpenAIServer


@pytest.fixture(autouse=True, scope="session")
def _no_trace_export() -> None:
    """No test may send traces anywhere: the SDK exports to api.openai.com when a key is set."""
    set_tracing_disabled(True)


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """A server that accepts only SERVER_KEY; a script bug or an exhausted script fails the test."""
    with OpenAIServer(api_key=SERVER_KEY) as server:
        yield server
    assert not server.errors, server.errors


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A real llama-server with SmolLM2-135M on a free loopback port, 4k context; stopped after."""
    running = start_llama(tmp_path_factory.mktemp("llama") / "llama-server.log")
    try:
        yield running
    finally:
        stop_llama(running)
    assert running.process.returncode is not None
