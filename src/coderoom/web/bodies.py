"""Request bodies read whole and checked before a route acts on them (issue 20).

Why: a route that acts on what it could parse of a body opens sessions for garbage. A form cut
short (no closing boundary: a client that died, a proxy that gave up), a urlencoded or JSON body
sent where the page sends multipart, a body whose client went away: each opened a real sandbox
and took a slot, so a thousand of them filled the server. And JSON nested a few thousand levels
deep made the decoder raise RecursionError, a 500 with a traceback. Here such a body is refused
(400, or 413 over its bound) before anything starts.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message, Receive

from ..errors import RequestRefused

MULTIPART = "multipart/form-data"
MAX_JSON_BYTES = 256 * 1024
"""Of a JSON body (a request of MAX_REQUEST_CHARS, every character escaped, fits)."""
TAIL_BYTES = 1024
"""Of the end of a multipart body kept to find its closing boundary (and whitespace after it)."""


class BodyRefused(RequestRefused):
    """A body the route does not take: the message says why (400)."""


class JsonTooLarge(RequestRefused):
    """A JSON body over MAX_JSON_BYTES (413)."""


def _boundary(request: Request) -> bytes:
    content_type = request.headers.get("content-type", "")
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != MULTIPART:
        raise BodyRefused(f"the body must be {MULTIPART} (the page's form), not {kind.strip()[:60]!r}")
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value.strip('"'):
            return value.strip('"').encode("latin-1", "replace")
    raise BodyRefused(f"a {MULTIPART} body needs a boundary")


class _Tail:
    """A `receive` that keeps the last TAIL_BYTES of the body that passes through it."""

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.bytes = b""

    async def __call__(self) -> Message:
        message = await self.receive()
        if message["type"] == "http.request":
            self.bytes = (self.bytes + message.get("body", b""))[-TAIL_BYTES:]
        return message


@contextlib.asynccontextmanager
async def complete_form(request: Request, **bounds: Any) -> AsyncIterator[FormData]:
    """The request's multipart form, only if the body is multipart and whole (it ends with the
    closing boundary); BodyRefused otherwise. `bounds` are Starlette's (max_files, ...)."""
    boundary = _boundary(request)
    tail = _Tail(request.receive)
    try:
        async with Request(request.scope, tail).form(**bounds) as form:
            if not tail.bytes.rstrip(b"\r\n\t ").endswith(b"--" + boundary + b"--"):
                raise BodyRefused("the form is cut short: its closing boundary never came")
            yield form
    except ClientDisconnect:
        raise BodyRefused("the client went away before its form was complete") from None


async def json_body(request: Request) -> Any:
    """The request's JSON, read up to MAX_JSON_BYTES (JsonTooLarge past it); BodyRefused when it
    is not JSON or nested deeper than the decoder goes."""
    body = b""
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_JSON_BYTES:
                raise JsonTooLarge(f"a JSON body of at most {MAX_JSON_BYTES} bytes (MAX_JSON_BYTES)")
    except ClientDisconnect:
        raise BodyRefused("the client went away before its body was complete") from None
    try:
        return json.loads(body)
    except RecursionError:
        raise BodyRefused("the JSON is nested too deeply") from None
    except ValueError:
        raise BodyRefused("the body is not JSON") from None
