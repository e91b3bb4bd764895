"""A change to an openai client that must hold on the copies the SDK makes of it.

Why: on a retried request, and on every request when retries are off, the SDK's Chat Completions
model asks `client.with_options(max_retries=0)` for a new client; a method replaced on the
original is not on that copy. Before this, a retried request went out without `wire`'s ""
content and took a stream cut mid-reply as whole (attack W-S03). `on_every_copy` applies a
change to the client and to each copy (and copy of a copy) `copy`/`with_options` make of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openai import AsyncOpenAI


def on_every_copy(client: AsyncOpenAI, change: Callable[[AsyncOpenAI], object]) -> AsyncOpenAI:
    """`client` with `change` applied, and applied again to every copy made of it."""
    change(client)
    copy = client.copy

    def changed_copy(*args: Any, **kwargs: Any) -> AsyncOpenAI:
        return on_every_copy(copy(*args, **kwargs), change)

    client.copy = client.with_options = changed_copy  # type: ignore[method-assign]
    return client
