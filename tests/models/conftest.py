"""Fixtures for the model layer: a scripted OpenAI-speaking server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import set_tracing_disabled

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
