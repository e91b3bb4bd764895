"""The HTTP transport of every model client: answers bounded in bytes while they arrive.

A model server's answer is hostile in size as in content: one chat completion of 150 MiB kept
the CLI busy for minutes and took 1.6 GB (attack B07). The openai client reads a whole answer
before it parses it, so the bound sits under it, in the httpx transport: reading stops at
MAX_RESPONSE_BYTES with an error naming the limit, whatever the server claimed in its headers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2 as httpx  # the HTTP library of the openai client (httpx2 since openai 3)
from openai import DefaultAsyncHttpxClient

MAX_RESPONSE_BYTES = 32 * 1024**2


class ResponseTooLarge(httpx.DecodingError):
    """The server's answer passed MAX_RESPONSE_BYTES (a DecodingError: the openai client reports
    it as a failed request, not as a connection worth retrying at once)."""


class _Capped(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, limit: int, url: str) -> None:
        self._stream, self._limit, self._url = stream, limit, url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._stream:
            seen += len(chunk)
            if seen > self._limit:
                raise ResponseTooLarge(
                    f"the model server's answer from {self._url} is over {self._limit} bytes "
                    "(MAX_RESPONSE_BYTES); it was not read further"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._stream.aclose()


class CappedTransport(httpx.AsyncBaseTransport):
    def __init__(self, limit: int = MAX_RESPONSE_BYTES) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        url = str(request.url.copy_with(query=None))
        response.stream = _Capped(response.stream, self._limit, url)  # type: ignore[arg-type]
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def bounded_http_client() -> httpx.AsyncClient:
    """The openai client's own httpx defaults, over the capped transport."""
    return DefaultAsyncHttpxClient(transport=CappedTransport())
