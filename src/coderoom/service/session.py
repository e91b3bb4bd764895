"""`Session`: a sandbox, its Python kernel, its workspace and a conversation that live across
requests, recorded as a run folder like a CLI run's (so `show`, `export` and `rerun` read it).

Why one class for the web page, the MCP server and scripts: each request (an `ask` of the
agent, or a direct `run_python`, `exec` or file call) must meet the same limits and land in the
same record. The agent loop is run.py's (`AgentRig`: the same agent, hooks, run config and
Runner call as a one-shot run) and the open and close are a run's (`lifecycle.RunLifecycle`);
the kernel is the agent's own, so a direct `run_python` and the model's calls share variables. Everything the sandbox sends back is bounded here; what is done
with it (escaping, image checks beyond the PNG header) is the caller's boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from agents.exceptions import MaxTurnsExceeded
from agents.sandbox.errors import ExecTimeoutError, SandboxError, WorkspaceIOError, WorkspaceReadNotFoundError

from ..errors import (
    NoSuchFile, ReadTooLarge, RequestRefused, RunFolderUnavailable, SandboxFailed, SandboxUnavailable, SaveFailed,
    SessionClosed, WorkspaceWriteFailed,
)
from ..host_disk import write_problem
from ..hostile.names import UnsafePath, safe_relative_path, shown
from ..interrupts import received_signal
from ..jobs import DEFAULT_INSTRUCTIONS, Job, build_job
from ..lifecycle import RunLifecycle
from ..models import ResolvedModel, explain_model_error, resolve_model
from ..record import bounded
from ..record.writer import shell_result
from ..record.events import Cell, Egress, Event
from ..record.hooks import MAX_ARGUMENT_CHARS
from ..run import DECLINED, AgentRig, new_run_dir
from ..sandboxes.limits import Limits
from ..sandboxes.spec import EnvironmentSpec
from ..sandboxes.base import SandboxBackend
from ..sandboxes.defaults import default_backend_name
from ..sandboxes.registry import backend_for
from ..tools.python_kernel import (
    MAX_CODE_BYTES, KernelClient, KernelError, cell_record, cell_timeout, format_result, keeps_processes, read_figure,
)
from .activity import Activity
from .events import EventHub
from .history import History
from .sandbox import WARM_MODULES, warm_imports

if TYPE_CHECKING:
    from .pool import Claims

SESSION_PROMPT = "a live session: each request is an ask_start event"
"""The job prompt a session's record carries (a job needs one); the requests are events."""
MAX_REQUEST_CHARS = 100_000  # one ask's request
STOPPED = "stopped on request: the agent's turn was cancelled and a running cell interrupted; the kernel keeps its variables"
CANCELLED = "[kernel] cancelled by the caller: the cell was interrupted; the next cell says how it ended"
MAX_UPLOAD_BYTES = 256 * 1024**2  # one file written into the workspace (also at most file_size)
MAX_READ_BYTES = 64 * 1024**2  # one file read back (a caller may ask for less)
MAX_LISTED_FILES = 10_000  # entries `files()` returns; the rest are counted, not listed
EXIT_TIMEOUT = 124
# one NUL-terminated entry per file: kind, size, workspace-relative path; .coderoom/ is coderoom's
LIST_FILES = r"find . -mindepth 1 -path ./.coderoom -prune -o -printf '%y %s %P\0'"
KINDS = {"f": "file", "d": "dir", "l": "link"}


@dataclass
class AskResult:
    status: Literal["ok", "failed", "error", "interrupted", "stopped"]
    final_output: str = ""
    error: str | None = None


@dataclass
class CellResult:
    """One direct `run_python` cell: status as the kernel said ('ok', 'error', 'interrupted',
    'restarted', 'crashed', 'bad_request'; 'unreachable' when no kernel answered), the text a
    model would read (bounded by tool_output_chars) and each figure as PNG bytes."""

    status: str
    text: str
    images: list[bytes] = field(default_factory=list)
    cell: Cell | None = None
    connections: list[Egress] = field(default_factory=list)  # see `ConnectionTap`


@dataclass
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    connections: list[Egress] = field(default_factory=list)  # see `ConnectionTap`


@dataclass
class FileInfo:
    path: str
    size: int
    kind: str  # file, dir, link, other


class ConnectionTap:
    """A record listener that hands the sandbox's egress events (connection attempts through its
    allowlist's proxy) to the direct calls in flight, so each call's result names the connections
    made while it ran. The proxy reports a connection when it ends: one the call left open is in
    the record (and on the page) but not in that call's result."""

    def __init__(self) -> None:
        self._open: list[list[Egress]] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, Egress):
            for seen in self._open:
                seen.append(event)

    @contextlib.contextmanager
    def during(self) -> Iterator[list[Egress]]:
        seen: list[Egress] = []
        self._open.append(seen)
        try:
            yield seen
        finally:
            self._open.remove(seen)


def session_job(
    *, name: str, model: str | None, sandbox: str, limits: Limits, instructions: str, handed_in: bool = False,
    environment: EnvironmentSpec | None = None,
) -> Job:
    """The job a session's record carries: what `rerun` and `show` read back (`environment`: the
    server's declared packages, if any, built for the sandbox and recorded as a run's). A backend object
    `handed_in` by the calling code (a test's fake) is one no job may name: the job is checked
    with the default backend, then names `sandbox` as given, so the record says what ran."""
    job = build_job(
        {
            "name": name,
            "prompt": SESSION_PROMPT,
            "instructions": instructions or DEFAULT_INSTRUCTIONS,
            "model": model or "",
            "sandbox": {
                "backend": default_backend_name() if handed_in else sandbox, "limits": limits,
                **({"environment": environment.model_dump()} if environment is not None else {}),
            },
        },
        source="session",
    )
    if not handed_in:
        return job
    return job.model_copy(update={"sandbox": job.sandbox.model_copy(update={"backend": sandbox})})


def check_command_timeout(timeout: float | None) -> None:
    """Refuse a client's command timeout that is not a number of seconds over 0 (NaN too). One
    rule for every session: under `--ray` the driver bounds its wait on the node by it
    (`RaySession._deadline`), so a negative or NaN one must be refused there before the call,
    or the driver's wait ends at once and the session is lost (attack R-F7)."""
    if timeout is not None and not timeout > 0:
        raise RequestRefused("a command's timeout must be more than 0 seconds")


class Session(Activity):
    """A live session; make one with `await Session.open(...)`, end it with `await close()`."""

    max_read_bytes = MAX_READ_BYTES  # the most read_file reads, for callers that do not import this module
    lost: str | None = None  # never: it runs in this process (a `RaySession` can lose its node)

    def __init__(self, lifecycle: RunLifecycle, hub: EventHub, tap: ConnectionTap) -> None:
        super().__init__(hub)
        self.id = secrets.token_urlsafe(16)
        self.job = lifecycle.job
        self.model = lifecycle.model
        self.run_dir = lifecycle.run_dir
        self.limits = self.job.sandbox.limits
        self._live = lifecycle  # the run this session is: its sandbox's SDK session is `_live.session`
        self._recorder = lifecycle.recorder
        self._tap = tap
        self._rig = AgentRig.build(self.job, self.model, self._recorder, lifecycle.session)
        self._history = History()
        self._ask_lock = asyncio.Lock()
        self._close_lock = asyncio.Lock()
        self._asking: asyncio.Task[Any] | None = None
        self._stopping = False  # the ask in flight is being stopped (`stop`), not closed
        self._calls = 0
        self._warming: asyncio.Future[bool] | None = None  # see `_warm`

    @classmethod
    async def open(
        cls,
        *,
        model: str | ResolvedModel | None = None,
        sandbox: str = "local",
        limits: Limits | None = None,
        environment: EnvironmentSpec | None = None,
        files: Mapping[str, bytes | Path] | None = None,
        runs_dir: str | os.PathLike[str] = "runs",
        name: str = "session",
        pool: Claims | None = None,
        instructions: str = "",
        environ: dict[str, str] | None = None,
        backend: SandboxBackend | None = None,
    ) -> Session:
        """Start the sandbox (warm from `pool` when it has one for these limits), copy `files`
        in, and begin the record. Host paths in `files` are read as given (O_NOFOLLOW, regular
        files only): which host paths a client may name is the caller's policy. `model` is a
        spec (`--model`'s forms; None: OpenAI with OPENAI_API_KEY, else offline) or a resolved
        model (tests pass a scripted one). `backend`: an object to run the sandbox instead of the
        registry's (tests hand in the fake; see `registry.backend_for`), named by `sandbox`."""
        spec = model if isinstance(model, str) or model is None else None
        job = session_job(
            name=name, model=spec, sandbox=sandbox, limits=limits or Limits(), instructions=instructions,
            handed_in=backend is not None, environment=environment,
        )
        # usage errors (model spec, backend unavailable) come before the run folder exists
        resolved = model if isinstance(model, ResolvedModel) else resolve_model(job.model or None, environ=environ)
        try:
            # a bad name, an oversized or unreadable file: refused before the run folder exists
            staged = {str(_workspace_name(name)): workspace_content(name, data, job.sandbox.limits) for name, data in (files or {}).items()}
            reason = backend_for(job.sandbox, backend).unavailable_reason(job.sandbox)
            if reason is not None:
                raise SandboxUnavailable(reason)
        except BaseException:
            await resolved.aclose()
            raise
        hub, tap = EventHub(), ConnectionTap()
        lifecycle = await _begin_run_folder(job, Path(runs_dir), resolved, hub, tap)
        async with lifecycle.steps(end=False):
            await lifecycle.start_sandbox(pool.claim if pool is not None else None, backend)
            warming = _warm(lifecycle)  # first: the kernel starts while the rest of the open runs
            try:
                self = cls(lifecycle, hub, tap)
                self._warming = warming
                written = await lifecycle.stage(self._write_all(staged))
            except BaseException:  # no session: its warm-up is not left running on
                if warming is not None:
                    warming.cancel()
                    await asyncio.gather(warming, return_exceptions=True)
                raise
            lifecycle.recorder.emit("session_open", session_id=self.id, pooled=lifecycle.pooled, files=written)
        return self

    # -- state (`closed`, `busy`, `idle_for`, `subscribe`: see Activity) ----------------

    def _begin(self) -> None:
        self._check_open()
        self._active += 1
        self.last_used = time.monotonic()

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosed(f"session {self.id} is closed; its record is in {self.run_dir}")

    def _end(self) -> None:
        self._active -= 1
        self.last_used = time.monotonic()

    def _call_id(self) -> str:
        self._calls += 1
        return f"client-{self._calls}"

    # -- the agent -----------------------------------------------------------------------

    async def ask(self, request: str) -> AskResult:
        """One request to the agent with the session's model; the model sees the earlier asks
        (bounded: `History`) and the kernel keeps its variables. Asks run one at a time."""
        if len(request) > MAX_REQUEST_CHARS:
            raise RequestRefused(f"the request is over {MAX_REQUEST_CHARS:,} characters (MAX_REQUEST_CHARS)")
        if not request.strip():
            raise RequestRefused("the request is empty")
        self._begin()
        try:
            async with self._ask_lock:
                if self._closed:
                    raise SessionClosed(f"session {self.id} was closed while this request waited")
                self._asking = asyncio.current_task()
                try:
                    return await self._ask(request)
                finally:
                    self._asking = None
        finally:
            self._end()

    async def _ask(self, request: str) -> AskResult:
        self._recorder.emit("ask_start", request=request)
        answer = AskResult(status="error")
        dropped = 0
        try:
            outcome = await self._rig.turns(self._history.next_input(request), self.job.max_turns)
            answer.final_output = str(outcome.final_output or "")
            dropped = self._history.update(outcome.to_input_list())
            if self.model.declined():
                answer.status, answer.error = "failed", DECLINED
            else:
                answer.status = "ok"
        except MaxTurnsExceeded:
            answer.status, answer.error = "failed", f"the agent used all {self.job.max_turns} turns"
            dropped = self._history.update(self._history.next_input(request))
        except asyncio.CancelledError:
            if not self._stopping or self._closed:
                answer.status, answer.error = "interrupted", "the session was closed during this request"
                raise
            # a Stop is an answer, not an exception: the caller's ask returns it, the task goes on
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            answer.status, answer.error = "stopped", STOPPED
            dropped = self._history.update(self._history.next_input(request))
        except Exception as exc:
            answer.error = explain_model_error(exc) or f"{type(exc).__name__}: {exc}"
        finally:
            self._recorder.emit(
                "ask_end", status=answer.status, final_output=bounded(answer.final_output, MAX_ARGUMENT_CHARS),
                error=answer.error, history_items=len(self._history.items), history_dropped=dropped,
            )
            self._live.result.final_output = answer.final_output
        return answer

    # -- direct calls --------------------------------------------------------------------

    async def run_python(self, code: str) -> CellResult:
        """One cell in the agent's own kernel (the same variables as its run_python calls)."""
        if len(code.encode("utf-8")) > MAX_CODE_BYTES:
            raise RequestRefused(f"the code is over {MAX_CODE_BYTES // 1024**2} MiB (MAX_CODE_BYTES)")
        self._begin()
        try:
            call_id, started = self._call_id(), time.monotonic()
            arguments = {"code": code} if len(code) <= MAX_ARGUMENT_CHARS else bounded(code, MAX_ARGUMENT_CHARS)
            self._recorder.emit("tool_start", call_id=call_id, name="run_python", arguments=arguments, origin="client")
            timeout = cell_timeout(self.limits.timeout)  # as the agent's own run_python
            session = self._live.session
            with self._tap.during() as connections:
                try:
                    result = await KernelClient(session).run(code, timeout)
                except KernelError as exc:
                    result = None
                    done = CellResult(status="unreachable", text=f"[kernel] {exc}")
                except asyncio.CancelledError:  # the kernel interrupts the cell; the next one says how it ended
                    self._recorder.emit(
                        "tool_result", call_id=call_id, name="run_python", arguments=arguments, output=CANCELLED,
                        duration_s=round(time.monotonic() - started, 4), origin="client",
                    )
                    raise
            if result is not None:
                cell = cell_record(result, timeout=timeout)
                text = format_result(result, images=True, timeout=timeout)
                images = [data for fig in result.figures if (data := await read_figure(session, fig.path))]
                done = CellResult(status=cell.status, text=bounded(text, self.limits.tool_output_chars),
                                  images=images, cell=cell)
            done.connections = connections
            self._recorder.emit(
                "tool_result", call_id=call_id, name="run_python", arguments=arguments, output=bounded(done.text),
                cell=done.cell, duration_s=round(time.monotonic() - started, 4), origin="client",
            )
            return done
        finally:
            self._end()

    async def interrupt(self) -> bool:
        """Interrupt the `run_python` cell in flight (the agent's or a direct one) as Jupyter
        does: it returns 'interrupted' and the kernel keeps its variables; only a cell that
        ignores the interrupt for INTERRUPT_GRACE_S is killed, and its result says the state
        was lost. False when no cell was running."""
        self._check_open()
        return await KernelClient(self._live.session).interrupt()

    async def stop(self) -> Literal["ask", "cell"] | None:
        """Stop what is running, keeping the session: the ask in flight is cancelled (its cell,
        if one runs, is interrupted as `interrupt` does, so the kernel keeps its variables) and
        its `ask` returns status 'stopped', as its ask_end records; without an ask, a direct
        cell is interrupted. What was stopped, or None when nothing ran."""
        self._check_open()
        asking = self._asking
        if asking is None or asking.done():
            return "cell" if await self.interrupt() else None
        self._stopping = True
        try:
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)
        finally:
            self._stopping = False
        return "ask"

    async def exec(self, command: str, timeout: float | None = None) -> CommandResult:
        """`sh -c command` in the workspace, at most the session's timeout; streams bounded by
        output_bytes. Recorded like the agent's exec_command, so exports and rerun include it."""
        if len(command) > MAX_ARGUMENT_CHARS:
            raise RequestRefused(f"the command is over {MAX_ARGUMENT_CHARS:,} characters")
        check_command_timeout(timeout)
        self._begin()
        try:
            call_id, started = self._call_id(), time.monotonic()
            wall = min(timeout or self.limits.timeout, self.limits.timeout)
            self._recorder.emit("tool_start", call_id=call_id, name="exec_command", arguments={"cmd": command}, origin="client")
            with self._tap.during() as connections:
                try:
                    raw = await self._live.session.exec("sh", "-c", command, shell=False, timeout=wall)
                    cap = self.limits.output_bytes
                    done = CommandResult(raw.exit_code, _text(raw.stdout[:cap]), _text(raw.stderr[:cap]))
                except (ExecTimeoutError, TimeoutError):
                    done = CommandResult(EXIT_TIMEOUT, "", f"[coderoom: stopped after {wall:g} s (the timeout limit)]", True)
            done.connections = connections
            took = round(time.monotonic() - started, 4)
            output = done.stdout + done.stderr
            shell = shell_result("timed_out" if done.timed_out else "exited", output, command=command,
                                 exit_code=done.exit_code, wall_time_s=took)
            self._recorder.emit(
                "tool_result", call_id=call_id, name="exec_command", arguments={"cmd": command},
                output=bounded(output), shell=shell, duration_s=took, origin="client",
            )
            return done
        finally:
            self._end()

    async def write_file(self, path: str, data: bytes) -> None:
        """Write `data` at workspace path `path` (a safe relative name; at most MAX_UPLOAD_BYTES
        and file_size)."""
        self._begin()
        try:
            await self._write(path, data)
        finally:
            self._end()

    async def _write_all(self, files: Mapping[str, bytes]) -> list[str]:
        return [await self._write(path, data) for path, data in files.items()]

    async def _write(self, path: str, data: bytes | Path) -> str:
        rel = _workspace_name(path)
        content = workspace_content(path, data, self.limits)
        session = self._live.session
        if len(rel.parts) > 1:
            try:
                await session.mkdir(Path(rel.parent), parents=True)
            except SandboxError as exc:  # a file where a folder should be, a name the file system refuses
                raise WorkspaceWriteFailed(f"{shown(str(rel.parent))}: the sandbox did not make this folder ({type(exc).__name__})") from None
        try:
            await session.write(Path(rel), io.BytesIO(content))
        except SandboxError as exc:
            raise WorkspaceWriteFailed(f"{shown(str(rel))}: the sandbox did not write it ({type(exc).__name__})") from None
        self._recorder.emit("file_written", path=str(rel), size=len(content))
        return str(rel)

    async def read_file(self, path: str, max_bytes: int = MAX_READ_BYTES, *, head: bool = False) -> bytes:
        """A workspace file's bytes, at most `max_bytes` (and MAX_READ_BYTES): over it, ReadTooLarge,
        or with `head` its first `max_bytes` bytes and one more (so a preview knows it was cut).
        A link is resolved inside the sandbox only, and only to a regular file under the
        workspace; no such file, or one the sandbox would not read, is NoSuchFile."""
        rel = _workspace_name(path)
        cap = max(0, min(max_bytes, MAX_READ_BYTES))
        self._begin()
        try:
            data = await self._live.session.read_bounded(Path(rel), max_bytes=cap + 1)
        except WorkspaceReadNotFoundError:
            raise NoSuchFile(f"{shown(str(rel))}: no such regular file in the workspace") from None
        except WorkspaceIOError as exc:  # a link out of the workspace, a special file (docker's archive read)
            raise NoSuchFile(f"{shown(str(rel))}: not a regular file the sandbox will read ({type(exc).__name__})") from None
        except ExecTimeoutError as exc:  # docker: sandbox code froze the commands reading a file it locked
            raise SandboxFailed(
                f"{shown(str(rel))}: the read did not finish within {exc.timeout_s:g} s (sandbox code may have stopped it)"
            ) from None
        finally:
            self._end()
        if len(data) > cap and not head:
            raise ReadTooLarge(f"{shown(str(rel))}: over the {cap:,} byte read limit")
        self._recorder.emit("file_read", path=str(rel), size=len(data))
        return data

    async def files(self, *, quiet: bool = False) -> list[FileInfo]:
        """The workspace's entries (not .coderoom/), at most MAX_LISTED_FILES.

        `quiet`: a listing for someone other than the session's user (the MCP server's
        resources/list walks every session): it is not use, so the idle timeout still counts,
        and it writes nothing into the record."""
        if quiet:
            self._check_open()
            raw = await self._live.session.exec("sh", "-c", LIST_FILES, shell=False, timeout=self.limits.timeout)
        else:
            self._begin()
            try:
                raw = await self._live.session.exec("sh", "-c", LIST_FILES, shell=False, timeout=self.limits.timeout)
            finally:
                self._end()
        entries: list[FileInfo] = []
        for record in raw.stdout.split(b"\0"):
            kind, _, rest = record.partition(b" ")
            size, _, name = rest.partition(b" ")
            if not name or not size.isdigit():
                continue  # the cut-off last record, or not find's
            entries.append(FileInfo(_text(name), int(size), KINDS.get(_text(kind), "other")))
            if len(entries) >= MAX_LISTED_FILES:
                break
        if not quiet:
            self._recorder.emit("files_listed", entries=len(entries))
        return entries

    # -- the end -------------------------------------------------------------------------

    async def close(self, *, keep_unsaved: bool = True) -> Path:
        """Stop any ask in flight, save the workspace into the run folder as a run does, close
        the sandbox and end the record (run_end); the run folder. Idempotent.

        A save the host's disk refuses raises SaveFailed naming the disk. With `keep_unsaved`
        the session then stays open, its files in the sandbox, so a close after space returns
        saves them; without it (shutdown) the session closes anyway and the message says so."""
        async with self._close_lock:
            if self._closed:
                return self.run_dir
            self._closed = True  # no request starts while it closes
            lifecycle = self._live
            kept: SaveFailed | None = None  # refused by the disk, the session stays open (keep_unsaved)
            unsaved: SaveFailed | None = None  # refused by the disk at shutdown: closed anyway, said
            # everything from here runs in the lifecycle's steps: a cancel at any await (a client's
            # cancel of its close, a server's shutdown grace) still closes the sandbox and ends the
            # record "interrupted", and an error is named by the step it happened in
            async with lifecycle.steps(end=False, raise_errors=False):
                if self._warming is not None:  # the warm-up's cell, if it runs, is interrupted
                    self._warming.cancel()
                    await asyncio.gather(self._warming, return_exceptions=True)
                if self._asking is not None:
                    self._asking.cancel()
                    await asyncio.gather(self._asking, return_exceptions=True)
                try:
                    await lifecycle.save_or_stay_open()
                except SaveFailed as exc:
                    if keep_unsaved:
                        kept = exc
                    else:
                        unsaved = exc
                if kept is None:
                    if received_signal():  # closed by the service's shutdown on a signal
                        lifecycle.interrupted()
                    else:
                        lifecycle.result.status = "ok"
                    await lifecycle.end()
            if kept is not None:
                self._closed = False  # open as it was: a close after space returns saves it
                raise SaveFailed(self._unsaved(kept.message, kept=True)) from kept
            if unsaved is not None and lifecycle.result.status == "error":  # its retry at the end failed too
                raise SaveFailed(self._unsaved(unsaved.message, kept=False)) from unsaved
        return self.run_dir

    def _unsaved(self, problem: str, kept: bool) -> str:
        """What a close the disk refused tells the caller: the problem and what is kept where."""
        if kept:
            return (
                f"session {self.id} was not closed: {problem}. Kept: the session stays open with its files in "
                f"the sandbox (its kernel was stopped for the save) and its record so far in {self.run_dir}; "
                "free space there and close it again"
            )
        return f"session {self.id} was closed unsaved: {problem}; its record is in {self.run_dir}"


def _warm(lifecycle: RunLifecycle) -> asyncio.Future[bool] | None:
    """Without a warm pool's sandbox, start the kernel and import WARM_MODULES in it now, in the
    background, one module a step: while the session is built, the files are copied in and the
    model thinks, rather than in the first cell. A first cell that comes sooner waits for the
    step in progress only (the kernel's start, say) and goes ahead of the imports left, and the
    cells are unchanged (`KernelClient.warm`)."""
    session = lifecycle.session
    if lifecycle.pooled or not keeps_processes(session):
        return None
    steps = [warm_imports((module,)) for module in WARM_MODULES]
    return asyncio.ensure_future(KernelClient(session).warm(steps, cell_timeout(lifecycle.job.sandbox.limits.timeout)))


async def _begin_run_folder(job: Job, runs_dir: Path, model: ResolvedModel, hub: EventHub,
                            tap: ConnectionTap) -> RunLifecycle:
    """A new run folder with its record begun; on a disk that refuses either, no folder is left
    and the session is not opened (RunFolderUnavailable, in `host_disk`'s words)."""
    run_dir: Path | None = None
    try:
        run_dir = new_run_dir(job, runs_dir)
        return await RunLifecycle.begin(run_dir, job, model, [hub.publish, tap], on_end=hub.close)
    except OSError as exc:
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)  # made just now: nothing of anyone else's
        raise RunFolderUnavailable(
            f"the session was not opened: its run folder could not be written under {runs_dir}: "
            f"{write_problem(exc, run_dir or runs_dir)}; no run folder was left and no sandbox started"
        ) from exc


def _workspace_name(path: str) -> PurePosixPath:
    try:
        return safe_relative_path(path)
    except UnsafePath as exc:
        raise RequestRefused(f"not a workspace path: {exc}") from None


def workspace_content(name: str, data: bytes | Path, limits: Limits) -> bytes:
    """A file's bytes for the workspace, at most MAX_UPLOAD_BYTES and the file_size limit."""
    cap = min(MAX_UPLOAD_BYTES, limits.file_size)
    if isinstance(data, Path):
        content = _read_host_file(data, cap)
    elif isinstance(data, bytes):
        content = data
    else:  # a str would be ambiguous: the text to write, or a host path to read?
        raise TypeError(f"{name[:200]}: give the content as bytes or a host file as a pathlib.Path, not {type(data).__name__}")
    if len(content) > cap:
        raise RequestRefused(f"{name[:200]}: {len(content):,} bytes, over the {cap:,} byte limit for one file")
    return content


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _read_host_file(path: Path, cap: int) -> bytes:
    """A host file's bytes: opened O_NOFOLLOW (a link is refused), a regular file, at most `cap`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise RequestRefused(f"{path}: cannot open ({exc.strerror}; links are not followed)") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise RequestRefused(f"{path}: not a regular file")
        return handle.read(cap + 1)


__all__ = ["AskResult", "CellResult", "CommandResult", "FileInfo", "Session", "workspace_content"]
