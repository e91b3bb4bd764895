"""The MCP server's tools and resources, all on one `SessionManager` (the web page's too).

Tools for a calling agent with its own model: `open_session` (files from allowed host paths or
uploaded content), `run_python` (text, and figures as image content), `exec`, `write_file`,
`read_file` (images as images), `list_files`, `close_session`; and `run_job`, a whole coderoom
run with the server's model. Artifacts are resources: `coderoom://session/{id}/{path}` for a
live session's workspace files, `coderoom://run/{run}/{path}` for a finished run's outputs.

Every answer is built from hostile data through `content` (bounded, escaped, images checked);
every refusal is a tool error with coderoom's message, never a traceback. Every file leaves
through the exit policy (`hostile.exits`, judged on the whole workspace or run folder): a
planted `.git/config`, a repository under another name, a hook, a link or a special file is
refused by `read_file` and both resource templates, and never listed as a resource.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.types import CallToolResult, ContentBlock, Resource, ResourceLink

from ..errors import CoderoomError, RequestRefused
from ..hostile.exits import LEFT_OUT_NOTE, ExitEntry, exit_policy, folder_entries, refuse_leaving
from ..hostile.names import UnsafePath, safe_relative_path
from ..hostile.tree import open_beneath
from ..record.events import Egress
from ..record.names import RUN_NAME
from ..record.notes import egress_line, egress_row
from ..sandboxes.limits import Limits
from ..sandboxes.spec import EnvironmentSpec
from ..service import SessionManager
from . import content
from .cluster_job import JobEnd, on_cluster
from .job_progress import JobProgress
from .policy import ReadPolicy
from .presence import ClientGone, Presence, client_request
from .results import (CellRun, ClosedSession, CommandRun, Connection, FileList, JobRun, ListedFile, LostRun, OpenedSession,
                      OutputStatus, ReadFile, SessionLimits, WrittenFile, answer)

MAX_UPLOAD_BYTES = 32 * 1024**2  # one file sent by a client (decoded), or read from an allowed path
MAX_OPEN_FILES = 100  # files one open_session or run_job copies in
MAX_OPEN_TOTAL_BYTES = 256 * 1024**2
"""Of all files one open_session or run_job copies in (read from host paths and decoded)."""
MAX_RESOURCE_BYTES = 16 * 1024**2  # one resource read
MAX_LISTED_RESOURCES = 200  # session output files listed as resources

INSTRUCTIONS = (
    "coderoom runs Python and shell commands in an isolated sandbox (no network, resource "
    "limits). Open a session with open_session (copy in files by allowed host path or as "
    "uploaded base64 content), then call run_python: variables persist between calls, so load "
    "data once and reuse it. Figures come back as images. Close the session when done: its "
    "workspace and a full record are saved as a run folder. run_job runs a whole coderoom agent "
    "(the server's own model) on a request and returns its outputs."
)


@dataclass
class ServerSettings:
    """What the server's operator chose; a client can change none of it."""

    model: str | None
    sandbox: str
    limits: Limits
    runs_dir: Path
    policy: ReadPolicy
    environment: EnvironmentSpec | None = None  # the declared packages (`--package`); None: none
    cluster: Any = None  # with --ray: `batch.cluster.RayJobs`, where run_job runs (else: on this machine)


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[content.text(message)], is_error=True)


async def _guarded(presence: Presence, ctx: Context, work: Callable[[], Awaitable[CallToolResult]],
                   session_id: str | None = None, *, cancellable: bool = True) -> CallToolResult:
    """One tool call: coderoom's refusals as tool errors; cancelled if its HTTP client drops it
    (`presence`, which also hears which session the call names), unless not `cancellable` (a
    close asked for is finished: a cut one would end its record unsaved)."""
    try:
        return await presence.call(ctx, work, session_id, cancellable=cancellable)
    except CoderoomError as exc:
        return _error(exc.message)
    except ClientGone as exc:  # nobody reads it; said for the SDK's log of an unanswered call
        return _error(str(exc))


def decode_upload(name: str, data: str) -> bytes:
    if len(data) > (MAX_UPLOAD_BYTES * 4) // 3 + 4:
        raise RequestRefused(f"{name}: over the {MAX_UPLOAD_BYTES:,} byte limit for one upload")
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise RequestRefused(f"{name}: not valid base64") from None


async def gather_files(policy: ReadPolicy, files: dict[str, str] | None, uploads: dict[str, str] | None) -> dict[str, bytes]:
    """Workspace name -> bytes, from allowed host paths (`files`) and base64 `uploads`; at most
    MAX_OPEN_FILES files and MAX_OPEN_TOTAL_BYTES in all, each read bounded by what is left of
    that total. Host files are read in a worker thread (the server keeps answering meanwhile)."""
    files, uploads = files or {}, uploads or {}
    if len(files) + len(uploads) > MAX_OPEN_FILES:
        raise RequestRefused(f"more than {MAX_OPEN_FILES} files at once (MAX_OPEN_FILES)")
    gathered: dict[str, bytes] = {}
    left = MAX_OPEN_TOTAL_BYTES
    over = f"the files come to over {MAX_OPEN_TOTAL_BYTES:,} bytes (MAX_OPEN_TOTAL_BYTES)"
    for name, host in files.items():
        if left <= 0:
            raise RequestRefused(over)
        gathered[name] = await asyncio.to_thread(policy.read, host, min(MAX_UPLOAD_BYTES, left))
        left -= len(gathered[name])
    for name, data in uploads.items():
        if len(data) > (left * 4) // 3 + 4:
            raise RequestRefused(over)
        gathered[name] = decode_upload(name, data)
        left -= len(gathered[name])
    if left < 0:
        raise RequestRefused(over)
    return gathered


def build_server(manager: SessionManager, settings: ServerSettings, presence: Presence | None = None) -> CoderoomServer:
    """The server's tools on `manager`; `presence` (default: its own, RECONNECT_GRACE_S) says
    what a vanished HTTP client's calls and sessions become (`serve.http_app` watches for it)."""
    presence = presence or Presence(manager)
    server = CoderoomServer(manager, settings, presence, name="coderoom", instructions=INSTRUCTIONS)

    @server.tool()
    async def open_session(ctx: Context, files: dict[str, str] | None = None,
                           uploads: dict[str, str] | None = None) -> Annotated[CallToolResult, OpenedSession]:
        """Open a sandbox session. `files`: workspace path -> host path under a folder the server
        may read; `uploads`: workspace path -> base64 content. Returns the session id."""
        async def work() -> CallToolResult:
            async def prepare() -> dict[str, Any]:  # once a slot is held: a refused open reads nothing
                return {"files": await gather_files(settings.policy, files, uploads)}

            session = await manager.open(prepare=prepare)
            presence.used(session.id, client_request(ctx))
            names = sorted({**(files or {}), **(uploads or {})})
            opened = OpenedSession(session_id=session.id, files=[content.safe(n) for n in names], workspace="/workspace",
                                   output_dir="output/", limits=_limits(session.limits))
            return answer(opened, content.text(
                f"session_id: {session.id}\nfiles: {', '.join(names) or 'none'}\nworkspace: /workspace "
                f"(the working directory; results go in output/)\nlimits: {_limits_text(opened.limits)}"))
        return await _guarded(presence, ctx, work)

    @server.tool()
    async def run_python(ctx: Context, session_id: str, code: str) -> Annotated[CallToolResult, CellRun]:
        """Run Python in the session's persistent kernel (variables persist between calls).
        Returns stdout, stderr, the last value and the traceback; figures as images. A cell that
        did not end "ok" (an exception, a timeout, an interrupt) is an error result."""
        async def work() -> CallToolResult:
            cell = await manager.get(session_id).run_python(code)
            images = [block for data in cell.images if (block := content.image(data)) is not None]
            ran = CellRun(session_id=session_id, status=cell.status, cell=cell.cell.number if cell.cell else None,
                          text=content.safe(cell.text), figures=len(images), connections=_connections(cell.connections))
            return answer(ran, content.text(cell.text + _connections_text(cell.connections)), *images,
                          is_error=cell.status != "ok")
        return await _guarded(presence, ctx, work, session_id)

    @server.tool(name="exec")
    async def exec_(ctx: Context, session_id: str, command: str, timeout: float | None = None) -> Annotated[CallToolResult, CommandRun]:
        """Run a shell command (sh -c) in the session's workspace; exit code, stdout, stderr. A
        non-zero exit code (124: the timeout) is an error result."""
        async def work() -> CallToolResult:
            done = await manager.get(session_id).exec(command, timeout)
            ran = CommandRun(session_id=session_id, exit_code=done.exit_code, timed_out=done.timed_out,
                             stdout=content.safe(done.stdout), stderr=content.safe(done.stderr),
                             connections=_connections(done.connections))
            return answer(ran, content.text(f"exit code: {done.exit_code}\n[stdout]\n{done.stdout}\n[stderr]\n{done.stderr}"
                                            + _connections_text(done.connections)),
                          is_error=done.exit_code != 0)
        return await _guarded(presence, ctx, work, session_id)

    @server.tool()
    async def write_file(ctx: Context, session_id: str, path: str, text: str | None = None,
                         base64_content: str | None = None) -> Annotated[CallToolResult, WrittenFile]:
        """Write a workspace file from `text` (UTF-8) or `base64_content`."""
        async def work() -> CallToolResult:
            if (text is None) == (base64_content is None):
                raise RequestRefused("give exactly one of text and base64_content")
            data = text.encode("utf-8") if text is not None else decode_upload(path, base64_content or "")
            if len(data) > MAX_UPLOAD_BYTES:
                raise RequestRefused(f"{path}: over the {MAX_UPLOAD_BYTES:,} byte limit for one upload")
            await manager.get(session_id).write_file(path, data)
            written = WrittenFile(session_id=session_id, path=content.safe(path), size=len(data))
            return answer(written, content.text(f"wrote {len(data)} bytes to {path}"))
        return await _guarded(presence, ctx, work, session_id)

    @server.tool()
    async def read_file(ctx: Context, session_id: str, path: str) -> Annotated[CallToolResult, ReadFile]:
        """Read a workspace file: an image as image content, text as text, else base64."""
        async def work() -> CallToolResult:
            data = await read_session_file(manager.get(session_id), path)
            uri = session_uri(session_id, path)
            found = ReadFile(session_id=session_id, path=content.safe(path), size=len(data), uri=content.safe(uri))
            return answer(found, content.file_content(uri, data))
        return await _guarded(presence, ctx, work, session_id)

    @server.tool()
    async def list_files(ctx: Context, session_id: str) -> Annotated[CallToolResult, FileList]:
        """The session's workspace files: kind, size in bytes, path, and why the exit policy
        keeps one in (read_file refuses it)."""
        async def work() -> CallToolResult:
            entries = await manager.get(session_id).files()
            policy = exit_policy(ExitEntry(e.path, e.kind) for e in entries)
            listed = [ListedFile(path=content.safe(e.path), kind=e.kind, size=e.size,
                                 left_out=content.safe(reason) if (reason := policy.refusal(e.path)) else None)
                      for e in entries]
            lines = [f"{e.kind}\t{e.size}\t{e.path}" + (f"\tleft out: {e.left_out}" if e.left_out else "")
                     for e in listed] or ["(empty)"]  # fmt: skip
            return answer(FileList(session_id=session_id, files=listed), content.text("\n".join(lines)))
        return await _guarded(presence, ctx, work, session_id)

    @server.tool()
    async def close_session(ctx: Context, session_id: str) -> Annotated[CallToolResult, ClosedSession]:
        """Close the session: its workspace and record are saved as a run folder."""
        async def work() -> CallToolResult:
            run_dir = await manager.close(session_id)
            closed = ClosedSession(session_id=session_id, run_folder=str(run_dir))
            return answer(closed, content.text(f"closed; run folder: {run_dir}"))
        return await _guarded(presence, ctx, work, session_id, cancellable=False)

    @server.tool()
    async def run_job(ctx: Context, request: str, outputs: list[str] | None = None, files: dict[str, str] | None = None,
                      uploads: dict[str, str] | None = None) -> Annotated[CallToolResult, JobRun]:
        """Run a whole coderoom agent (the server's model) on `request` with these input files;
        `outputs` are required files under output/ (`PATH:allow-empty`: an empty result, such as
        a CSV with a header and no rows, is fine). Returns the answer and the outputs as resources."""
        async def work() -> CallToolResult:
            async with manager.slot():  # a whole run is a sandbox too: it counts against max_sessions
                return await _run_job(settings, request, outputs or [], files, uploads, ctx)
        return await _guarded(presence, ctx, work)

    @server.resource("coderoom://session/{session_id}/{+path}", mime_type="application/octet-stream")
    async def session_file(session_id: str, path: str) -> bytes:
        """A live session's workspace file."""
        try:
            return await read_session_file(manager.get(session_id), path)
        except CoderoomError as exc:  # the client sees coderoom's reason, not "Error creating resource"
            raise ResourceError(exc.message) from None

    @server.resource("coderoom://run/{run}/{+path}", mime_type="application/octet-stream")
    def run_file(run: str, path: str) -> bytes:
        """A file of a finished run's outputs (under output/ in its run folder)."""
        try:
            return read_run_file(settings.runs_dir, run, path)
        except CoderoomError as exc:
            raise ResourceError(exc.message) from None

    return server


class CoderoomServer(MCPServer):
    """Lists each live session's output files as resources, beside the templates; `presence`
    is what its HTTP app watches clients with."""

    def __init__(self, manager: SessionManager, settings: ServerSettings, presence: Presence, **kw: Any) -> None:
        super().__init__(**kw)
        self._manager = manager
        self.presence = presence

    async def list_resources(self) -> list[Resource]:
        """Quiet listings: a client's resources/list is no use of the sessions (their idle timeout
        still runs) and writes nothing into their records."""
        listed = await super().list_resources()
        for session in self._manager.live:
            try:
                entries = await session.files(quiet=True)
            except CoderoomError:
                continue
            policy = exit_policy(ExitEntry(e.path, e.kind) for e in entries)
            for entry in entries:
                if entry.kind != "file" or policy.refusal(entry.path) is not None:
                    continue
                if entry.path.startswith("output/") and len(listed) < MAX_LISTED_RESOURCES:
                    listed.append(Resource(uri=session_uri(session.id, entry.path), name=entry.path, size=entry.size))
        return listed


def session_uri(session_id: str, path: str) -> str:
    return f"coderoom://session/{session_id}/{path}"


async def read_session_file(session: Any, path: str) -> bytes:
    """A live session's workspace file, if the exit policy, judging the whole workspace, lets it out."""
    entries = await session.files(quiet=True)
    refuse_leaving(exit_policy(ExitEntry(e.path, e.kind) for e in entries), path)
    return await session.read_file(path, MAX_RESOURCE_BYTES)


def read_run_file(runs_dir: Path, run: str, path: str) -> bytes:
    """An output of a run folder under `runs_dir`, O_NOFOLLOW from the folder down, bounded, if
    the exit policy lets it out."""
    if not RUN_NAME.match(run):
        raise RequestRefused("not a run folder name")
    try:
        rel = safe_relative_path(path)
    except UnsafePath as exc:
        raise RequestRefused(f"not a run file path: {exc}") from None
    if rel.parts[0] != "output":
        raise RequestRefused("only a run's outputs (output/...) are resources")
    refuse_leaving(exit_policy(folder_entries(runs_dir.resolve() / run), own=(LEFT_OUT_NOTE,)), rel)
    try:
        fd = open_beneath(runs_dir.resolve() / run, rel, os.O_RDONLY)
    except OSError:
        raise RequestRefused(f"{run}/{rel}: no such output") from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_RESOURCE_BYTES + 1)
    if len(data) > MAX_RESOURCE_BYTES:
        raise RequestRefused(f"{run}/{rel}: over the {MAX_RESOURCE_BYTES:,} byte resource limit")
    return data


async def _run_job(settings: ServerSettings, request: str, outputs: list[str], files: dict[str, str] | None,
                   uploads: dict[str, str] | None, ctx: Context) -> CallToolResult:
    """One whole run, here or (`--ray`) on a cluster node as one job of `coderoom batch --ray`;
    its progress told to the client alike (`job_progress`)."""
    from ..jobs import build_job
    from ..run import new_run_dir

    gathered = await gather_files(settings.policy, files, uploads)
    staging = Path(tempfile.mkdtemp(prefix="coderoom-mcp-inputs-"))  # 0700, removed after the run
    progress = JobProgress(lambda count, message: ctx.report_progress(count, None, message))
    sender = asyncio.ensure_future(progress.sending())
    try:
        inputs: dict[str, Path] = {}
        for n, (name, data) in enumerate(gathered.items()):
            host = staging / f"input-{n}"
            host.write_bytes(data)
            inputs[name] = host
        job = build_job({
            "name": "mcp-job", "prompt": request, "inputs": inputs, "outputs": outputs,
            "model": settings.model or "",
            "sandbox": {
                "backend": settings.sandbox, "limits": settings.limits,
                **({"environment": settings.environment.model_dump()} if settings.environment is not None else {}),
            },
        }, source="run_job")
        run_dir = new_run_dir(job, settings.runs_dir)
        if settings.cluster is None:
            ended = JobEnd.of_run(await _here(job, run_dir, progress))
        else:
            ended = JobEnd.of_cluster_job(await on_cluster(settings.cluster, job, run_dir, [progress]), run_dir)
    finally:
        sender.cancel()
        shutil.rmtree(staging, ignore_errors=True)
    return _job_answer(ended)


async def _here(job: Any, run_dir: Path, progress: JobProgress) -> Any:
    from ..run import run_job

    return await run_job(job, run_dir=run_dir, listeners=[progress])


def _job_answer(ended: JobEnd) -> CallToolResult:
    checks = "\n".join(f"- {c.path}: {'ok' if c.ok else 'INVALID'} ({c.detail})" for c in ended.checks)
    where = f"node: {ended.node} ({ended.host})\n" if ended.node else ""
    lost = "".join(f"lost attempt: node {a.node} ({a.host}), its partial record in {a.run_dir}\n" for a in ended.lost)
    summary = (f"status: {ended.status}\nrun folder: {ended.run_dir}\n" + where + lost
               + (f"error: {ended.error}\n" if ended.error else "")
               + (f"outputs:\n{checks}\n" if checks else "") + f"\n{ended.final_output}")
    links: list[ContentBlock] = []
    uris: dict[str, str] = {}
    output_dir = ended.run_dir / "output"
    for name in ended.saved:  # on a cluster, the node's record says these: names checked before use
        try:
            rel = safe_relative_path(name)
        except UnsafePath:
            continue
        if rel.parts and rel.parts[0] == "output" and (output_dir.parent / rel).is_file():
            uris[str(rel)] = uri = f"coderoom://run/{ended.run_dir.name}/{rel}"
            links.append(ResourceLink(type="resource_link", uri=uri, name=str(rel)))
    ran = JobRun(status=ended.status, run_folder=str(ended.run_dir), error=content.safe(ended.error) if ended.error else None,
                 outputs=[OutputStatus(path=content.safe(c.path), ok=c.ok, detail=content.safe(c.detail), uri=uris.get(c.path))
                          for c in ended.checks],
                 final_output=content.safe(ended.final_output), node=ended.node, host=ended.host,
                 lost_attempts=[LostRun(run_folder=a.run_dir, node=a.node, host=a.host) for a in ended.lost])
    return answer(ran, content.text(summary), *links, is_error=ended.status != "ok")


MAX_CONNECTIONS_SHOWN = 200  # of one call's connection attempts in its result (the record has all)


def _connections(events: list[Egress]) -> list[Connection]:
    """A call's connection attempts as structured content, each string the sandbox's, made inert."""
    return [Connection.model_validate({k: content.safe(v) if isinstance(v, str) else v for k, v in egress_row(e).items()})
            for e in events[:MAX_CONNECTIONS_SHOWN]]


def _connections_text(events: list[Egress]) -> str:
    """The same attempts as lines for the text a model reads (escaped with the rest of it)."""
    if not events:
        return ""
    more = len(events) - MAX_CONNECTIONS_SHOWN
    lines = [egress_line(e) for e in events[:MAX_CONNECTIONS_SHOWN]] + ([f"... {more} more"] if more > 0 else [])
    return "\n[connections]\n" + "\n".join(lines)


def _limits(limits: Limits) -> SessionLimits:
    return SessionLimits(timeout_s=limits.timeout, memory_bytes=limits.memory, workspace_bytes=limits.workspace_size,
                         network=limits.network)


def _limits_text(limits: SessionLimits) -> str:
    return (f"{limits.timeout_s:g} s per command, memory {limits.memory_bytes:,} bytes, "
            f"workspace {limits.workspace_bytes:,} bytes, network {'on' if limits.network else 'off'}")
