"""The checks every request to a coderoom server crosses before any route sees it, as small ASGI
middlewares (each one job, Starlette-style: `Middleware(Class, **options)` or `Class(app, ...)`).

* `HostCheck`: only the Host headers the server was started for (421). DNS rebinding: a page on
  another name that resolves to 127.0.0.1 sends its own Host and is refused.
* `BearerToken`: `Authorization: Bearer <token>` on every request but the public paths' GET/HEAD
  (401 with WWW-Authenticate). The token is random (`new_token`), printed once at start, compared
  in constant time (`secrets.compare_digest`), and never in a cookie or a URL a browser sends:
  cookies are not scoped by port, so any other server on 127.0.0.1 would get one.
* `OriginCheck`: an Origin header, when sent, must be this server's (403), so a page elsewhere
  cannot drive it through a browser even with a token it somehow holds.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_BYTES = 32
"""Of randomness in a token (`secrets.token_urlsafe`)."""
BEARER = "bearer "
SAFE_METHODS = frozenset({"GET", "HEAD"})
TOKEN_REFUSAL = "a bearer token is required: send Authorization: Bearer <the token the server printed at start>"
HOST_REFUSAL = "unexpected Host header: this server answers only the names it was started for"
ORIGIN_REFUSAL = "cross-origin request refused"


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def has_token(headers: Headers, token: str) -> bool:
    """Whether `headers` carry `Authorization: Bearer <token>` (the scheme in any case)."""
    given = headers.get("authorization", "")
    if given[: len(BEARER)].lower() != BEARER:
        return False
    return secrets.compare_digest(given[len(BEARER) :].strip().encode(), token.encode())


async def refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str,
                 headers: dict[str, str] | None = None) -> None:
    await PlainTextResponse(message + "\n", status_code=status, headers=headers)(scope, receive, send)


def _is_request(scope: Scope) -> bool:
    return scope["type"] in ("http", "websocket")


class HostCheck:
    """Refuses (421) a request whose Host header is not one of `hosts` ("name:port")."""

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = frozenset(host.lower() for host in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _is_request(scope) and Headers(scope=scope).get("host", "").lower() not in self.hosts:
            await refuse(scope, receive, send, 421, HOST_REFUSAL)
            return
        await self.app(scope, receive, send)


class BearerToken:
    """Refuses (401) a request without the bearer token; GET/HEAD of `public_paths` (a page and
    its secret-free script and style) need none."""

    def __init__(self, app: ASGIApp, *, token: str, public_paths: Iterable[str] = ()) -> None:
        self.app = app
        self.token = token
        self.public_paths = frozenset(public_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if _is_request(scope) and not self._public(scope) and not has_token(Headers(scope=scope), self.token):
            await refuse(scope, receive, send, 401, TOKEN_REFUSAL, {"www-authenticate": 'Bearer realm="coderoom"'})
            return
        await self.app(scope, receive, send)

    def _public(self, scope: Scope) -> bool:
        return scope.get("method", "GET") in SAFE_METHODS and scope["path"] in self.public_paths


class OriginCheck:
    """Refuses (403) a request whose Origin header, when sent, is not `http://` one of `hosts`."""

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str]) -> None:
        self.app = app
        self.origins = frozenset(f"http://{host.lower()}" for host in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = Headers(scope=scope).get("origin") if _is_request(scope) else None
        if origin is not None and origin.lower() not in self.origins:
            await refuse(scope, receive, send, 403, ORIGIN_REFUSAL)
            return
        await self.app(scope, receive, send)


def guarded(app: ASGIApp, *, token: str, hosts: Iterable[str] | None, public_paths: Iterable[str] = ()) -> ASGIApp:
    """`app` behind the shared checks, outermost first: Host, token, Origin. `hosts` None: no
    Host or Origin check (a remote bind with no names given, where the token is the guard)."""
    inner: ASGIApp = app
    if hosts is not None:
        inner = OriginCheck(inner, hosts=hosts)
    inner = BearerToken(inner, token=token, public_paths=public_paths)
    if hosts is not None:
        inner = HostCheck(inner, hosts=hosts)
    return inner
