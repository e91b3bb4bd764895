"""What coderoom changes in a Chat Completions request as it leaves, after the SDK converted the
history to messages (so no input filter can see it).

* An assistant message that only calls tools goes out with `"content": ""`, not `null`: both
  are valid OpenAI form, but llama-cpp-python's server answers `null` with HTTP 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from openai import AsyncOpenAI

from .client_copies import on_every_copy


def with_text_content(client: AsyncOpenAI) -> AsyncOpenAI:
    """`client` (and its copies), whose chat completions send "" for an assistant message's null content."""
    return on_every_copy(client, _send_text_content)


def _send_text_content(client: AsyncOpenAI) -> None:
    completions = client.chat.completions
    create: Callable[..., Awaitable[Any]] = completions.create

    async def create_with_text(*args: Any, **kwargs: Any) -> Any:
        messages = kwargs.get("messages")
        if isinstance(messages, list):
            kwargs["messages"] = [_text_content(message) for message in messages]
        return await create(*args, **kwargs)

    completions.create = create_with_text  # type: ignore[method-assign]


def _text_content(message: Any) -> Any:
    if isinstance(message, dict) and message.get("role") == "assistant" and message.get("content") is None:
        return {**message, "content": ""}
    return message
