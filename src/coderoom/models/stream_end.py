"""A Chat Completions stream that ends before its reply did is a cut connection, not a reply.

Why: the SDK's stream handler takes whatever arrived as the whole reply when a stream simply
ends; it asks for a finish_reason only of OpenAI's own endpoint. A server that ends a stream
cleanly in the middle of a reply (a worker that died behind a proxy, a hostile server) had its
half reply recorded as the run's final answer (attack W-S01). Here such a stream raises
`StreamCut` at its end, which the guard reports as the `APIConnectionError` a dropped connection
raises, so the retry policy treats the two alike. A stream that carried no chunk at all is left to `streaming.collect`: that is a server
that does not stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from openai import AsyncOpenAI

from .client_copies import on_every_copy
from .streaming import StreamCut

CUT_MESSAGE = "the stream ended before its reply did (no finish_reason)"


class WholeStream:
    """The chunks of `stream` as they come; at its end, `StreamCut` unless a chunk gave
    choice 0 a finish_reason. Closing and the HTTP response are the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.response = stream.response  # the SDK reads the request id from it

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Any]:
        started = finished = False
        async for chunk in self._stream:
            started = True
            finished = finished or any(c.index == 0 and c.finish_reason is not None for c in chunk.choices or ())
            yield chunk
        if started and not finished:
            raise StreamCut(CUT_MESSAGE)

    async def close(self) -> None:
        await self._stream.close()


def whole_streams(client: AsyncOpenAI) -> AsyncOpenAI:
    """`client` (and its copies), whose streamed chat completions raise when they end before
    their reply."""
    return on_every_copy(client, _whole_streams)


def _whole_streams(client: AsyncOpenAI) -> None:
    completions = client.chat.completions
    create: Callable[..., Awaitable[Any]] = completions.create

    async def create_whole(*args: Any, **kwargs: Any) -> Any:
        answer = await create(*args, **kwargs)
        return WholeStream(answer) if kwargs.get("stream") is True else answer

    completions.create = create_whole  # type: ignore[method-assign]
