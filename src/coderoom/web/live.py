"""Live sessions: opened from the page with uploads, asked and followed up, streamed as SSE.

A session is `coderoom.service`'s: its record is a run folder like a CLI run's. The server keeps
only which ask is running per session (one at a time) and streams the session's record events:
first those already written (read from run.jsonl), then live ones from `Session.subscribe`,
without repeating an event the replay had. The page's choices of model and sandbox are checked
against what the server was started with; a record never chooses them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..errors import CoderoomError, SessionLost, UsageError
from ..record import read_record
from ..record.events import LIVE_ONLY, EventsLost
from .bodies import complete_form, json_body
from .uploads import read_uploads
from .view import event_json

MAX_REQUEST_CHARS = 20_000
"""Of one request or follow-up typed in the page."""
MAX_FORM_FIELD_BYTES = 256 * 1024
SSE_PING_S = 15
MAX_EVENT_ID_DIGITS = 12
"""Of a Last-Event-ID header: more is no event number this server gave (and int() of thousands
of digits raises); such a header counts as none."""
log = logging.getLogger(__name__)


@dataclass
class Choices:
    """What the page may choose from: model specs and sandbox backends, the first the default."""

    models: list[str]
    sandboxes: list[str]


@dataclass
class Live:
    """The sessions this server opened, and the ask each is running."""

    manager: Any
    choices: Choices
    runs_dir: Any
    asks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)

    def session(self, session_id: str) -> Any:
        try:
            return self.manager.get(session_id)
        except SessionLost:
            raise  # its node went away: 410 with the reason, not "no such session"
        except (KeyError, LookupError, CoderoomError):
            return None

    def busy(self, session_id: str) -> bool:
        task = self.asks.get(session_id)
        return task is not None and not task.done()


def _pick(value: str | None, allowed: list[str], what: str) -> str:
    if not value:
        return allowed[0]
    if value not in allowed:
        raise UsageError(f"{what} {value[:80]!r} is not one this server offers: {', '.join(allowed)}")
    return value


async def open_session(request: Request) -> JSONResponse:
    """The form (uploads, model, sandbox) is read only once the manager holds a slot for the
    session: a full server (429) reads no upload. A body that is not a whole multipart form is
    refused (400) before a sandbox starts, and gives its slot back."""
    live: Live = request.app.state.live
    chosen: dict[str, Any] = {}

    async def prepare() -> dict[str, Any]:
        async with complete_form(request, max_files=64, max_fields=16, max_part_size=MAX_FORM_FIELD_BYTES) as form:
            chosen["files"] = await read_uploads(form)
            chosen["model"] = _pick(_field(form, "model"), live.choices.models, "model")
            chosen["sandbox"] = _pick(_field(form, "sandbox"), live.choices.sandboxes, "sandbox")
        return chosen

    session = await live.manager.open(prepare=prepare, runs_dir=live.runs_dir, name="web")
    return JSONResponse({"id": session.id, "run": session.run_dir.name, "model": chosen["model"], "sandbox": chosen["sandbox"]})


def _field(form: Any, name: str) -> str | None:
    value = form.get(name)
    return value if isinstance(value, str) else None


async def list_sessions(request: Request) -> JSONResponse:
    live: Live = request.app.state.live
    return JSONResponse([
        {"id": s.id, "run": s.run_dir.name, "busy": live.busy(s.id)} for s in live.manager.live
    ])


async def ask(request: Request) -> JSONResponse:
    live: Live = request.app.state.live
    session = live.session(request.path_params["id"])
    if session is None:
        return JSONResponse({"error": "no such live session"}, status_code=404)
    body = await json_body(request)  # not JSON, too deep: 400; too large: 413
    text = body.get("request") if isinstance(body, dict) else None
    if not isinstance(text, str):
        return JSONResponse({"error": 'the body must be JSON: {"request": "..."}'}, status_code=400)
    if not text.strip() or len(text) > MAX_REQUEST_CHARS:
        return JSONResponse({"error": f"a request needs 1 to {MAX_REQUEST_CHARS} characters"}, status_code=400)
    if live.busy(session.id):
        return JSONResponse({"error": "this session is still answering; wait for it"}, status_code=409)
    live.asks[session.id] = asyncio.create_task(_ask(session, text))
    return JSONResponse({"started": True}, status_code=202)


async def _ask(session: Any, text: str) -> None:
    """One ask in the background: its outcome is in the record (ask_end), which the page streams."""
    try:
        await session.ask(text)
    except Exception:  # recorded by the session; the server keeps serving
        log.exception("ask failed in session %s", session.id)


async def stop(request: Request) -> JSONResponse:
    """The page's Stop: `Session.stop` ends the ask in flight (its ask_end says 'stopped') or
    interrupts a direct cell; the session stays open. `stopped` is "ask", "cell" or null."""
    live: Live = request.app.state.live
    session = live.session(request.path_params["id"])
    if session is None:
        return JSONResponse({"error": "no such live session"}, status_code=404)
    return JSONResponse({"stopped": await session.stop()})


async def close_session(request: Request) -> JSONResponse:
    live: Live = request.app.state.live
    session = live.session(request.path_params["id"])
    if session is None:
        return JSONResponse({"error": "no such live session"}, status_code=404)
    task = live.asks.pop(session.id, None)
    if task is not None and not task.done():
        task.cancel()
    await live.manager.close(session.id)
    return JSONResponse({"run": session.run_dir.name})


async def events(request: Request) -> Any:
    live: Live = request.app.state.live
    session = live.session(request.path_params["id"])
    if session is None:
        return JSONResponse({"error": "no such live session"}, status_code=404)
    last = request.headers.get("last-event-id", "")
    after = int(last) if len(last) <= MAX_EVENT_ID_DIGITS and last.isascii() and last.isdigit() else 0
    return EventSourceResponse(_stream(session, after), ping=SSE_PING_S)


async def _stream(session: Any, after: int) -> AsyncIterator[ServerSentEvent]:
    """The record so far, then the events as they are written; each event once.

    Each event's SSE id is its line number in the record, so a browser that reconnects (it sends
    Last-Event-ID) gets only what it has not seen. `events_lost` (a slow reader's marker, never
    in the record) carries no id and moves the numbering past the events it stands for; the other
    LIVE_ONLY events (a reply's progress) carry no id and leave the numbering as it is.
    """
    updates = session.subscribe()
    pending: asyncio.Future[Any] = asyncio.ensure_future(anext(updates))
    await asyncio.sleep(0)  # the subscription is in place before the record is read
    try:
        replayed = await asyncio.to_thread(read_record, session.run_dir)
        seen: set[str] = set()
        last_t = -1.0
        number = 0
        for event in replayed.events:
            number += 1
            data = json.dumps(event_json(event))
            if event.t > last_t:
                last_t, seen = event.t, set()
            seen.add(data)
            if number > after:
                yield ServerSentEvent(data=data, id=str(number))
        while True:
            try:
                event = await pending
            except StopAsyncIteration:
                return
            pending = asyncio.ensure_future(anext(updates))
            data = json.dumps(event_json(event))
            if isinstance(event, EventsLost):
                number += event.count
                yield ServerSentEvent(data=data)
            elif event.type in LIVE_ONLY:
                yield ServerSentEvent(data=data)
            elif event.t > last_t or (event.t == last_t and data not in seen):
                number += 1
                if number > after:
                    yield ServerSentEvent(data=data, id=str(number))
    finally:
        pending.cancel()
        with contextlib.suppress(BaseException):
            await pending
        await updates.aclose()
