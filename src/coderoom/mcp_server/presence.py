"""A vanished MCP HTTP client: its call in flight is cancelled, and the sessions it used are not
held until the idle timeout.

Why coderoom watches this itself: the `mcp` SDK's streamable HTTP wire for the 2025 protocol
versions (its own client's, with an Mcp-Session-Id) does not cancel a request whose connection
drops: the handler runs on, its response kept for a resumption that needs an event store, which
coderoom does not configure, so nobody can ever read it. And it ends an MCP session only on the
client's DELETE or after 30 min with no request in flight. (Its 2026 single-exchange wire does
cancel a request whose response stream closes; the rules below hold there too.)

The rules, for `coderoom mcp --http`:

* A call whose HTTP request the client dropped before the answer was sent is cancelled as an MCP
  cancellation is (`notifications/cancelled`): a `run_python` cell is interrupted and the kernel
  keeps its variables (the session's next cell says how it ended), a command is stopped, an open
  or a run_job is undone or ends as an interrupted run does.
* Its client is then taken as gone, as it is when its event stream (GET) drops or it ends its MCP
  session (DELETE): every session that MCP session used (and the one the dropped call named or
  opened) is closed and saved as at the idle timeout once `grace_s` (`--client-grace`,
  RECONNECT_GRACE_S by default) has passed, unless, within it, any request comes from an MCP
  session that used it or any call names the session (a client that reconnected, or another one
  that knows the id): then it lives on under the idle timeout as before. A session another MCP
  session also used, not known gone, is not released at all: one client vanishing mid-call on a
  shared session must not close it under the other (gate and presence pass G-C4).

A request's drop is told by the ASGI `http.disconnect` message arriving before the last body
byte of its answer was sent (`Watch`, the outermost part of the MCP app inside the guard).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from . import RECONNECT_GRACE_S

if TYPE_CHECKING:
    from ..service import SessionManager

SCOPE_KEY = "coderoom.client_request"  # where `Watch` leaves each request's `ClientRequest`
MCP_SESSION_HEADER = "mcp-session-id"
T = TypeVar("T")


@dataclass
class ClientRequest:
    """One HTTP request of an MCP client: its MCP session (None before `initialize`, or on the
    2026 wire) and whether the client dropped it before its answer was sent."""

    mcp_session: str | None
    method: str
    dropped: anyio.Event = field(default_factory=anyio.Event)
    sessions: set[str] = field(default_factory=set)  # the live sessions its call named or opened
    answered: bool = False
    status: int | None = None


class Presence:
    """Which MCP sessions used each live session, and what to do when a client goes."""

    def __init__(self, manager: SessionManager, grace_s: float = RECONNECT_GRACE_S) -> None:
        if grace_s < 0:
            raise ValueError("grace_s must be >= 0")
        self.manager = manager
        self.grace_s = grace_s
        self._users: dict[str, set[str]] = {}  # live session id -> the MCP sessions that used it
        self._gone: set[str] = set()  # MCP sessions whose client went, until a request of theirs comes

    def used(self, session_id: str, request: ClientRequest | None) -> None:
        """A call names (or opened) `session_id`: it is kept (a released one too), and is that
        MCP session's."""
        self.manager.keep(session_id)
        if request is not None:
            request.sessions.add(session_id)
        if request is not None and request.mcp_session is not None:
            self._users.setdefault(session_id, set()).add(request.mcp_session)
            if len(self._users) > 2 * len(self.manager.live) + 16:  # closed sessions, forgotten
                self._forget_closed()

    def came(self, mcp_session: str) -> None:
        """A request from `mcp_session`: its client is here, its sessions are kept."""
        self._gone.discard(mcp_session)
        for session_id in self._sessions_of(mcp_session):
            self.manager.keep(session_id)

    def went(self, mcp_session: str | None, sessions: Iterable[str] = ()) -> None:
        """The client of `mcp_session` went away: its sessions (and `sessions`) are released,
        but for those another MCP session, not known gone, used too."""
        self._forget_closed()
        chosen = set(sessions)
        if mcp_session is not None:
            self._gone.add(mcp_session)
            chosen.update(self._sessions_of(mcp_session))
        for sid in chosen:
            if self._users.get(sid, set()) <= self._gone:
                self.manager.release_soon(sid, self.grace_s)

    def _forget_closed(self) -> None:
        live = {s.id for s in self.manager.live}
        self._users = {sid: users for sid, users in self._users.items() if sid in live}
        self._gone &= set().union(*self._users.values())

    def _sessions_of(self, mcp_session: str) -> list[str]:
        return [sid for sid, users in self._users.items() if mcp_session in users]

    async def call(self, ctx: Any, work: Callable[[], Awaitable[T]], session_id: str | None = None,
                   *, cancellable: bool = True) -> T:
        """Run one tool call's `work` (naming `session_id`, if any), cancelled if its client
        drops the request (ClientGone) and it is `cancellable`; a dropped request releases its
        client's sessions."""
        request = client_request(ctx)
        if session_id is not None:
            self.used(session_id, request)
        if request is None:  # stdio, or in memory: the transport ends the whole server
            return await work()
        if not cancellable:
            try:
                return await work()
            finally:
                if request.dropped.is_set():
                    self.went(request.mcp_session, request.sessions)
        try:
            with anyio.CancelScope() as scope:
                watch = asyncio.ensure_future(_cancel_on(request.dropped, scope))
                try:
                    result = await work()
                finally:
                    watch.cancel()
            if scope.cancelled_caught:
                raise ClientGone("the client dropped its request: the call was cancelled")
            return result
        finally:
            if request.dropped.is_set():
                self.went(request.mcp_session, request.sessions)


class ClientGone(Exception):
    """A call cancelled because its client dropped the request: nobody reads its answer."""


async def _cancel_on(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def client_request(ctx: Any) -> ClientRequest | None:
    """The `ClientRequest` a tool call came in (None on stdio or in memory)."""
    try:
        scope = ctx.request_context.request.scope
    except (AttributeError, ValueError, LookupError):
        return None
    found = scope.get(SCOPE_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, ClientRequest) else None


class Watch:
    """ASGI middleware: each HTTP request gets a `ClientRequest` in its scope, set `dropped` if
    the client disconnects before the answer's last byte; a request from an MCP session keeps
    its sessions (`came`), a dropped event stream (GET) or an MCP session ended (DELETE)
    releases them (`went`). A dropped call releases them itself, once it is cancelled."""

    def __init__(self, app: ASGIApp, *, presence: Presence) -> None:
        self.app = app
        self.presence = presence

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = ClientRequest(Headers(scope=scope).get(MCP_SESSION_HEADER), scope.get("method", ""))
        scope[SCOPE_KEY] = request
        if request.mcp_session is not None:
            self.presence.came(request.mcp_session)

        async def watched_receive() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" and not request.answered:
                request.dropped.set()
            return message

        async def watched_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                request.status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                request.answered = True
            await send(message)

        try:
            await self.app(scope, watched_receive, watched_send)
        finally:
            ended = request.method == "DELETE" and request.status is not None and request.status < 400
            if (request.method == "GET" and request.dropped.is_set()) or ended:
                self.presence.went(request.mcp_session)
