"""What the page's server checks beyond the shared guard (`coderoom.serving.guard`: Host, bearer
token, Origin), before any route sees a request.

* Token: printed once in the URL's fragment (`/#token=...`), which a browser never sends to any
  server. The page's script keeps it in sessionStorage and sends it as `Authorization: Bearer`
  on every call; every route but the page itself and its static script and style (PUBLIC_PATHS:
  they hold nothing secret) needs it.
* CSRF: a header-borne token is one no other site can make a browser send; on top, a request that
  changes state (any method but GET/HEAD) needs the CSRF token in the X-Coderoom-CSRF header (the
  page reads it from /api/config) and a Sec-Fetch-Site, when sent, of same-origin.
* Size: a body over MAX_BODY_BYTES is refused (413) by its Content-Length or as it streams.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..serving.guard import SAFE_METHODS, guarded, new_token

CSRF_HEADER = "x-coderoom-csrf"
MAX_BODY_BYTES = 300 * 1024**2
"""Of one request body: the upload bound (files.MAX_UPLOAD_TOTAL_BYTES) and room for the form."""
PUBLIC_PATHS = ("/", "/static/app.js", "/static/app.css")
"""What GET/HEAD may fetch without the token: the page and its script and style, secret-free."""


@dataclass(frozen=True)
class Secrets:
    """What a browser must show: the token (Authorization header) and, to change state, the CSRF token."""

    token: str = field(default_factory=new_token)
    csrf: str = field(default_factory=new_token)


def middleware(secrets_: Secrets, hosts: Iterable[str]) -> list[Middleware]:
    """The page's checks, outermost first: the shared guard (Host, token, Origin), then CSRF and size."""
    return [
        Middleware(guarded, token=secrets_.token, hosts=frozenset(hosts), public_paths=PUBLIC_PATHS),
        Middleware(Guard, secrets_=secrets_),
    ]


class Guard:
    """ASGI middleware: CSRF and body size, in that order, before the app."""

    def __init__(self, app: ASGIApp, *, secrets_: Secrets, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.secrets = secrets_
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope, Headers(scope=scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, self._bounded(receive), send)

    def _refusal(self, scope: Scope, headers: Headers) -> Response | None:
        if scope.get("method", "GET") not in SAFE_METHODS:
            if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
                return _refuse(403, "cross-site request refused")
            if not secrets.compare_digest(headers.get(CSRF_HEADER, "").encode(), self.secrets.csrf.encode()):
                return _refuse(403, f"missing or wrong {CSRF_HEADER} header")
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return _refuse(413, f"request body over {self.max_body} bytes (MAX_BODY_BYTES)")
        return None

    def _bounded(self, receive: Receive) -> Receive:
        """`receive` that ends the request once more than max_body bytes have streamed in."""
        seen = 0

        async def bounded() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise BodyTooLarge(f"request body over {self.max_body} bytes (MAX_BODY_BYTES)")
            return message

        return bounded


class BodyTooLarge(Exception):
    """A body without a Content-Length streamed past MAX_BODY_BYTES; the app answers 413."""


def _refuse(status: int, message: str) -> Response:
    return PlainTextResponse(message + "\n", status_code=status)
