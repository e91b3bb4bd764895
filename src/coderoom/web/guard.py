"""The boundary every request crosses before any route sees it.

* Host: only the names the server was started for (DNS rebinding: a page on another name that
  resolves to 127.0.0.1 sends its own Host and is refused, 421).
* Token: random (`secrets`), printed once in the URL's fragment (`/#token=...`), which a browser
  never sends to any server. No credential is ever in a cookie: cookies are not scoped by port,
  so any other server on 127.0.0.1 would get one (attack W01). The page's script keeps the token
  in sessionStorage and sends it as `Authorization: Bearer` on every call; every route but the
  page itself and its static script and style (PUBLIC_PATHS: they hold nothing secret) needs it
  (403 otherwise), compared in constant time.
* CSRF: a header-borne token is one no other site can make a browser send; on top, a request that
  changes state (any method but GET/HEAD) needs the CSRF token in the X-Coderoom-CSRF header (the
  page reads it from /api/config), an Origin, when sent, of this server, and a Sec-Fetch-Site,
  when sent, of same-origin.
* Size: a body over MAX_BODY_BYTES is refused (413) by its Content-Length or as it streams.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_HEADER = "x-coderoom-csrf"
TOKEN_BYTES = 32  # of randomness in the token and the CSRF token (secrets.token_urlsafe)
MAX_BODY_BYTES = 300 * 1024**2
"""Of one request body: the upload bound (files.MAX_UPLOAD_TOTAL_BYTES) and room for the form."""
SAFE_METHODS = frozenset({"GET", "HEAD"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
PUBLIC_PATHS = ("/", "/static/app.js", "/static/app.css")
"""What GET/HEAD may fetch without the token: the page and its script and style, secret-free."""
BEARER = "bearer "


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass(frozen=True)
class Secrets:
    """What a browser must show: the token (Authorization header) and, to change state, the CSRF token."""

    token: str = field(default_factory=new_token)
    csrf: str = field(default_factory=new_token)


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host headers this server answers: the loopback names, the bound address unless it is a
    wildcard, and any public names given, each with the port."""
    names = set(LOOPBACK_NAMES) | {name.lower() for name in extra}
    if host not in ("0.0.0.0", "::", ""):
        names.add(f"[{host}]" if ":" in host else host)
    return frozenset(f"{name}:{port}" for name in names)


class Guard:
    """ASGI middleware: Host, token, CSRF and body size, in that order, before the app."""

    def __init__(self, app: ASGIApp, *, secrets_: Secrets, hosts: frozenset[str], max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.secrets = secrets_
        self.hosts = hosts
        self.origins = frozenset(f"http://{host}" for host in hosts)
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, self._bounded(receive), send)

    def _refusal(self, scope: Scope, headers: Headers) -> Response | None:
        if headers.get("host", "").lower() not in self.hosts:
            return _refuse(421, "unexpected Host header: this server answers only the names it was started for")
        if scope.get("method", "GET") in SAFE_METHODS and scope["path"] in PUBLIC_PATHS:
            return None
        if not self._has_token(headers):
            return _refuse(403, "a token is needed: open the URL coderoom serve printed (it holds #token=...)")
        if scope.get("method", "GET") not in SAFE_METHODS:
            origin = headers.get("origin")
            if origin is not None and origin not in self.origins:
                return _refuse(403, "cross-origin request refused")
            if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
                return _refuse(403, "cross-site request refused")
            if not secrets.compare_digest(headers.get(CSRF_HEADER, "").encode(), self.secrets.csrf.encode()):
                return _refuse(403, f"missing or wrong {CSRF_HEADER} header")
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return _refuse(413, f"request body over {self.max_body} bytes (MAX_BODY_BYTES)")
        return None

    def _has_token(self, headers: Headers) -> bool:
        given = headers.get("authorization", "")
        if given[: len(BEARER)].lower() != BEARER:
            return False
        return secrets.compare_digest(given[len(BEARER) :].strip().encode(), self.secrets.token.encode())

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
