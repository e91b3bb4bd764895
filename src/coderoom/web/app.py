"""The Starlette application of `coderoom serve`: routes, the guard and the headers around them.

Routes (all behind `guard.middleware`: the shared Host, token and Origin checks of
`coderoom.serving.guard`, then CSRF and size; JSON unless said):

* `GET /` the page (static/index.html), `/static/...` its script and style;
* `GET /api/config`: the CSRF token, what the page may choose (models, sandboxes) and the warm
  pool's status (`WarmPool.status`: why warm-up fails, when it does);
* `POST /api/sessions` (multipart: files, model, sandbox), `GET /api/sessions`,
  `POST /api/sessions/{id}/ask`, `POST /api/sessions/{id}/stop` (the answer in flight, `Session.stop`),
  `POST /api/sessions/{id}/close`, `GET /api/sessions/{id}/events` (SSE);
* `GET /api/runs`, `GET /api/runs/{name}` (the record, bounded), `GET /api/runs/{name}/notebook`
  (the run as a Jupyter notebook: `coderoom export --notebook`'s, made in memory);
* files of a session or a run: `.../files`, `.../preview?path=`, `.../file?path=[&inline=1]`, `.../zip`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from importlib.resources import files as package_files
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import (
    EXIT_USAGE, CoderoomError, HostWriteFailed, NoSuchFile, ReadTooLarge, RequestRefused, SessionClosed, SessionLost, TooManySessions, UnknownSession,
)
from ..hostile.names import UnsafePath
from . import files as artifact_files
from .bodies import JsonTooLarge
from .files import FileSource, FileTooLarge, RunFolderFiles, SessionFiles, checked_path
from .guard import BodyTooLarge, Secrets, middleware
from .headers import FILE_CSP, SecurityHeaders
from .live import Choices, Live, ask, close_session, events, list_sessions, open_session, stop
from .runs import NoSuchRun, list_runs, run_folder, run_record
from .uploads import UploadRefused

STATIC = Path(str(package_files("coderoom.web") / "static"))
MAX_CONCURRENT_RECORD_READS = 2
"""Run records (and run lists) read at once, each in a worker thread: a forged record is read
within the reader's bounds but slowly; more requests wait, and the event loop never does."""


@dataclass
class WebConfig:
    """How the server was started: where runs live, what may be chosen, who may connect."""

    runs_dir: Path
    choices: Choices
    hosts: frozenset[str]
    secrets: Secrets


def build_app(config: WebConfig, manager: Any) -> Starlette:
    """The application over `manager` (a `coderoom.service.SessionManager`)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for task in app.state.live.asks.values():
                task.cancel()
            await manager.close_all()

    app = Starlette(
        routes=_routes(),
        middleware=[Middleware(SecurityHeaders), *middleware(config.secrets, config.hosts)],
        exception_handlers={
            CoderoomError: _coderoom_error, UploadRefused: _bad_request, UnsafePath: _bad_request,
            NoSuchRun: _not_found, FileNotFoundError: _not_found, IsADirectoryError: _not_found,
            FileTooLarge: _too_large, BodyTooLarge: _too_large,
        },
        lifespan=lifespan,
    )  # fmt: skip
    app.state.config = config
    app.state.record_reads = asyncio.Semaphore(MAX_CONCURRENT_RECORD_READS)
    app.state.live = Live(manager=manager, choices=config.choices, runs_dir=config.runs_dir)
    return app


def _routes() -> list[Any]:
    return [
        Route("/", lambda request: FileResponse(STATIC / "index.html")),
        Mount("/static", StaticFiles(directory=STATIC)),
        Route("/api/config", _config),
        Route("/api/sessions", open_session, methods=["POST"]),
        Route("/api/sessions", list_sessions),
        Route("/api/sessions/{id}/ask", ask, methods=["POST"]),
        Route("/api/sessions/{id}/stop", stop, methods=["POST"]),
        Route("/api/sessions/{id}/close", close_session, methods=["POST"]),
        Route("/api/sessions/{id}/events", events),
        Route("/api/runs", _runs),
        Route("/api/runs/{name}", _run),
        Route("/api/runs/{name}/notebook", _notebook),
        *_file_routes("/api/sessions/{id}", _session_files),
        *_file_routes("/api/runs/{name}", _run_files),
    ]


def _file_routes(prefix: str, source: Callable[[Request], FileSource | None]) -> list[Route]:
    def with_source(handler: Callable[[Request, FileSource], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            found = source(request)
            if found is None:
                return JSONResponse({"error": "no such session or run"}, status_code=404)
            return await handler(request, found)

        return endpoint

    async def listing(request: Request, files: FileSource) -> Response:
        return JSONResponse(await artifact_files.listing(files))

    async def preview(request: Request, files: FileSource) -> Response:
        return JSONResponse(await artifact_files.preview(files, checked_path(request.query_params.get("path"))))

    async def download(request: Request, files: FileSource) -> Response:
        path = checked_path(request.query_params.get("path"))
        return await artifact_files.download(files, path, inline=request.query_params.get("inline") == "1")

    async def zipped(request: Request, files: FileSource) -> Response:
        name = request.path_params.get("name") or "session-" + request.path_params.get("id", "")[:8]
        return await artifact_files.zipped(files, name)

    return [
        Route(prefix + "/files", with_source(listing)),
        Route(prefix + "/preview", with_source(preview)),
        Route(prefix + "/file", with_source(download)),
        Route(prefix + "/zip", with_source(zipped)),
    ]


def _session_files(request: Request) -> FileSource | None:
    session = request.app.state.live.session(request.path_params["id"])
    return None if session is None else SessionFiles(session)


def _run_files(request: Request) -> FileSource | None:
    try:
        return RunFolderFiles(run_folder(request.app.state.config.runs_dir, request.path_params["name"]))
    except NoSuchRun:
        return None


async def _config(request: Request) -> JSONResponse:
    config: WebConfig = request.app.state.config
    pool = request.app.state.live.manager.pool
    return JSONResponse({
        "csrf": config.secrets.csrf, "models": config.choices.models, "sandboxes": config.choices.sandboxes,
        "pool": None if pool is None else pool.status(),  # why warm-up fails, when it does
    })  # fmt: skip


async def _runs(request: Request) -> JSONResponse:
    live: Live = request.app.state.live
    running = {s.run_dir.name: s.id for s in live.manager.live}
    async with request.app.state.record_reads:
        runs = await asyncio.to_thread(list_runs, request.app.state.config.runs_dir)
    for run in runs:
        run["session"] = running.get(run["name"])
    return JSONResponse(runs)


async def _run(request: Request) -> JSONResponse:
    folder = run_folder(request.app.state.config.runs_dir, request.path_params["name"])
    async with request.app.state.record_reads:  # read and rendered to JSON off the event loop
        return await asyncio.to_thread(lambda: JSONResponse(run_record(folder)))


async def _notebook(request: Request) -> Response:
    """The run as the notebook `coderoom export --notebook` writes, sent as a download: built in
    memory (nothing is written into the run folder) with the export's own bounds on the record
    and the workspace archive."""
    folder = run_folder(request.app.state.config.runs_dir, request.path_params["name"])
    async with request.app.state.record_reads:
        text = await asyncio.to_thread(notebook_text, folder)
    return Response(
        text, media_type="application/x-ipynb+json",
        headers={"Content-Disposition": f'attachment; filename="{folder.name}.ipynb"', "Content-Security-Policy": FILE_CSP},
    )  # fmt: skip


def notebook_text(run_dir: Path) -> str:
    """The run's notebook as nbformat v4 JSON (imported here: nbformat stays off the server's start)."""
    import nbformat

    from ..export.notebook import build_notebook

    return nbformat.writes(build_notebook(run_dir))


HTTP_STATUS = {
    UnknownSession: 404, SessionLost: 410, SessionClosed: 409, TooManySessions: 429, NoSuchFile: 404, ReadTooLarge: 413, JsonTooLarge: 413,
    RequestRefused: 400,
    HostWriteFailed: 507,  # the runs disk is full or read-only: the server keeps answering, the message says what is kept
}
"""What a session's refusal is to a browser; any other usage error is 400, the rest 500."""


async def _coderoom_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, CoderoomError)
    status = next((code for kind, code in HTTP_STATUS.items() if isinstance(exc, kind)), None)
    if status is None:
        status = 400 if exc.exit_code == EXIT_USAGE else 500
    return JSONResponse({"error": exc.message[:2000]}, status_code=status)


async def _bad_request(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)[:2000]}, status_code=400)


async def _not_found(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": "not found"}, status_code=404)


async def _too_large(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)[:2000]}, status_code=413)
