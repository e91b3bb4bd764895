"""Live sessions on a Ray cluster (`coderoom serve --ray`, `coderoom mcp --ray`): each session a
Ray actor (`on_node.SessionActor`) placed by its limits (`cpus` as num_cpus, `memory` as memory)
on some node, its sandbox, kernel and workspace there; `RaySession` is what the manager, the page
and the MCP server hold instead of a `Session`, each call an actor call.

Why the record is copied as it is written: the run folder is the session's truth. The node
writes it; this side follows it (`SessionActor.tail`), keeps a copy in the run folder on this
machine and streams its events to the page, so a node lost mid-session leaves its record so far
here, ended by a `run_end` with status "lost" and the cause. A session closed normally comes back
whole, as a local session's run folder, through the exit policy (`cluster.transfer`), replacing
the copy. A call in flight when the node goes raises `SessionLost` (the page's 410, the MCP
tool's error) as soon as Ray knows the actor died, instead of waiting.

Why every actor call has a deadline: an actor whose process stopped answering while Ray still
counts it alive (SIGSTOP, a stuck event loop: its node healthy) left `files()` waiting for ever,
and a close waiting for ever held up the idle reaper behind it (one close at a time) and
`close_all` at shutdown (attack R-B9, docs/security.md). So each call waits at most its bound (a
cell's timeout, a save's, a small call's, plus `MARGIN_S`; `RaySession._deadline`), and one
past it declares the session lost ("no answer within N s"), its actor killed. The follower's
`tail` is a heartbeat: it is called all the time, so a stopped actor is found within its deadline
(`RaySession.tail_s`: TAIL_WAIT_S plus `RayOpener`'s `call_s`, 65 s by default) even while
nobody calls the session. Nothing here blocks the event loop on Ray: results are
awaited, and `ray.kill` (a round trip to Ray's control store) runs in a thread.

Why asks and cells are queued here: the node runs a session's asks one at a time, and its cells
one at a time (the kernel's), so a second one sent at once waited on the node behind the first,
and its deadline, started at the sending, declared a healthy session lost (attack R-E1,
docs/security.md). Queued here, each one's deadline starts when the one before it has ended; a
client's cell may still wait behind the agent's cells of the ask in flight (its deadline counts
that ask's), and each of the ask's cells behind at most one client's cell (its deadline counts
one per turn).

Why a reply's progress takes another way: it is no line of the record (`record.events.LIVE_ONLY`),
so `tail` never carries it. While an ask runs (its key open in the box only then, box and key
handed to the node with the ask), the node sends it to a `ProgressBox` actor on this machine's
node and this side relays it to the session's subscribers (`cluster.progress`, as MCP `run_job
--ray` does: bounded in rate and bytes, each report read as hostile data), never into the copy
of the record; a report that comes after its reply's `model_call` is dropped, so the page's
"receiving the reply" line does not come back once the reply is in.

What is lost with a node: the workspace and the kernel (nothing of them is on this machine until
the close); what the record had said of them stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from ..cluster.connect import busy_for, first_line, model_environ, room_for
from ..cluster.placement import Reservation, reserve
from ..cluster.progress import LazyBox, relay_reports
from ..cluster.transfer import unpack_run_folder
from ..jobs import Job
from ..lifecycle import SAVE_TIMEOUT_S
from ..models.base import DEFAULT_TIMEOUT_S, client_settings
from ..errors import (
    CoderoomError, RunFolderUnavailable, SandboxFailed, SaveFailed, SandboxUnavailable, SessionClosed, SessionLost, UsageError,
)
from ..hostile.archive import ArchiveError
from ..hostile.tree import WorkspaceLimitError
from ..record.events import EVENT_TYPES, Event, ModelStart, ModelStream, RunEnd
from ..record.names import RECORD_FILE, RUN_NAME
from ..record.reader import MAX_EVENTS, MAX_LINE_BYTES, MAX_RECORD_BYTES
from ..record.writer import encode
from ..sandboxes.limits import Limits
from ..sandboxes.spec import EnvironmentSpec
from ..tools.python_kernel import START_WAIT_S, cell_timeout
from .activity import Activity
from .events import EventHub
from .holder import lost_message
from .on_node import TAIL_WAIT_S, SessionActor
from .session import MAX_READ_BYTES, AskResult, CellResult, CommandResult, FileInfo, check_command_timeout, workspace_content

OPEN_TIMEOUT_S = 600.0  # for a node with room to take the session and start its sandbox
BUSY_GRACE_S = 20.0  # for a full cluster to free room (a session just closed: Ray frees its actor's cpus after the close)
CLOSE_TAIL_S = 3 * TAIL_WAIT_S  # after the close, for the record's last lines to arrive
CONFIRM_S = 60.0  # an actor Ray calls unavailable: how long it has to answer again before it counts as lost
CLEANUP_S = 30.0  # for the node to remove its copy of the run folder before the actor is ended
END_ROOM_BYTES = 64 * 1024  # of the copy, kept for the run_end "lost" after the node's lines (its cause is one line)

MARGIN_S = 60.0
"""Added to every bound the node keeps itself (a command's or a cell's timeout, the save's): the
actor's own time around it on a busy node (its event loop, Ray's scheduling, the answer's way
back). Too short, and a healthy but slow session would be declared lost."""
CALL_S = 60.0
"""The deadline of a small call, one that waits on nothing in the sandbox (interrupt, stop, where
the actor runs), and of a tail beyond its own wait: `RayOpener`'s `call_s` by default."""
PACK_S = 120.0
"""For the node to pack a run folder of up to `transfer.MAX_RUN_FOLDER_BYTES` (1 GiB) and hand it
to the object store after its save."""
CLOSE_S = SAVE_TIMEOUT_S + PACK_S + MARGIN_S
"""The close's deadline on the node: the save's own bound (`lifecycle.SAVE_TIMEOUT_S`), the run
folder's packing, and the margin (stopping an ask, closing the sandbox)."""
MAX_TURNS: int = Job.model_fields["max_turns"].default
"""An ask's turns (a session's job keeps the default)."""
CLOSE_BOUND_S = CLOSE_S + CLOSE_TAIL_S + CLEANUP_S
"""How long a close waits on the cluster at most, so `SessionManager.close_all` too: the close,
the record's last lines, the removal of the node's copy (bringing the run folder here is this
machine's own work, not counted)."""


STILL_REPLYING = frozenset({"egress", "model_retry", "model_stream_off"})
"""Record events between a model_start and its model_call that leave the reply on its way (its
request sent again); any other ends it (`RaySession._streamed`)."""


class RayOpener:
    """`SessionManager`'s opener under `--ray` (after `cluster.connect.connect`). Only the model's
    settings of `environ` (`cluster.connect.model_environ`) go to the nodes.

    Its sessions' asks share one `ProgressBox` actor on this machine's node, made at the first
    ask (`progress_box`, a `cluster.progress.LazyBox`): a server whose sessions never ask has none. It lives as long as the
    opener's handle does (the server's life: Ray ends it with its last handle or the driver).

    `call_s`: the deadline of its sessions' small calls (CALL_S by default), so how long an actor
    that stopped answering goes unnoticed (its tail's deadline is TAIL_WAIT_S more); shorter than a
    busy node's answer, it would declare healthy sessions lost. `busy_grace_s`: how long an open
    waits for room on a full cluster before it is refused (BUSY_GRACE_S by default); shorter than
    Ray takes to free a closed session's cpus, an open just after a close would be refused.
    Settings, not only constants, so that the tests of a stopped actor and of a refused open need
    not wait out the production bounds."""

    def __init__(self, environ: Mapping[str, str], *, call_s: float = CALL_S, busy_grace_s: float = BUSY_GRACE_S) -> None:
        if not (call_s > 0 and busy_grace_s >= 0):
            raise ValueError("a Ray session's call_s must be more than 0 seconds, its busy_grace_s 0 or more")
        import ray

        self.call_s, self.busy_grace_s = call_s, busy_grace_s
        self._ray = ray
        self._environ = model_environ(environ)
        self._actor: Any = ray.remote(SessionActor)
        self._model_s = client_settings(self._environ)[1]  # the model's deadline per call, as the node reads it
        self.progress_box = LazyBox(ray)  # the sessions' box and its token, made at the first ask

    async def __call__(
        self, *, model: Any = None, sandbox: str = "local", limits: Limits | None = None,
        files: Mapping[str, bytes | Path] | None = None, runs_dir: Path = Path("runs"), name: str = "session",
        pool: Any = None, instructions: str = "", backend: Any = None, environment: EnvironmentSpec | None = None,
    ) -> RaySession:  # fmt: skip
        """`Session.open`'s settings, the session opened on a node with room for its limits, in
        a warm actor of `pool` (`ray_pool.RayWarmPool`) when it has one for these settings; its
        host files read here (the nodes have not this machine's disk). Declared packages
        (`environment`) are built on the node, from the index its pip is configured for."""
        from .ray_pool import RayWarmPool, session_spec

        if backend is not None or not (pool is None or isinstance(pool, RayWarmPool)):
            raise UsageError("a --ray session takes no backend object and no warm pool but a node's (its node runs its own backend)")
        if model is not None and not isinstance(model, str):
            raise UsageError("a --ray session's model is a spec (--model's forms): it is resolved on its node")
        limits = limits or Limits()
        staged = {path: workspace_content(path, data, limits) for path, data in (files or {}).items()}
        settings = {"model": model, "sandbox": sandbox, "limits": limits, "files": staged, "name": name,
                    "instructions": instructions, "environ": self._environ, "environment": environment}  # fmt: skip
        warm = await pool.claim(session_spec(sandbox, limits, environment)) if pool is not None else None
        if warm is not None:
            actor, room = warm.actor, warm.room
        else:
            room = await self._room(limits)
            actor = self._actor.options(**room.options(limits), max_restarts=0, max_task_retries=0).remote()
        try:
            run_name = await asyncio.wait_for(_awaited(actor.open.remote(settings)), OPEN_TIMEOUT_S)
            place = await asyncio.wait_for(_awaited(actor.place.remote()), self.call_s)
            run_dir = _host_folder(runs_dir, run_name)
        except BaseException as exc:
            await asyncio.shield(asyncio.to_thread(_end, self._ray, actor, room.release))
            raise _opening_error(self._ray, exc, self.call_s) from None
        session = RaySession(self._ray, actor, run_dir, limits, (str(place[0]), str(place[1])), room.release,
                             model_s=self._model_s, progress=self.progress_box, call_s=self.call_s)  # fmt: skip
        try:
            await session.follow()
        except BaseException:
            with contextlib.suppress(Exception):  # what it can save, saved; the actor ended
                await session.close(keep_unsaved=False)
            raise
        return session

    async def _room(self, limits: Limits) -> Reservation:
        """Room on some node for a session of `limits`, taken atomically (`placement.reserve`:
        of two opens racing for the last room one is refused, not queued; attack R-B1), waiting
        up to `busy_grace_s` for a full cluster to free some; else SandboxUnavailable."""
        problem = await asyncio.to_thread(room_for, limits)
        if problem is not None:
            raise SandboxUnavailable(f"no node of the Ray cluster can hold this session: it {problem}")
        room = await reserve(limits, self.busy_grace_s)
        if room is None:
            busy = await asyncio.to_thread(busy_for, limits)
            raise SandboxUnavailable(
                "no room on the Ray cluster for this session now: it "
                + (busy or f"needs {limits.cpus:g} cpus; what was free was taken by other sessions (try again later)")
            )
        return room


async def _awaited(ref: Any) -> Any:
    return await ref


def _cancel(ray: Any, ref: Any) -> None:
    """Cancel a call on its node (a cell is interrupted there), whether the node answers or not."""
    with contextlib.suppress(Exception):
        ray.cancel(ref)


def _end(ray: Any, actor: Any, release: Callable[[], None]) -> None:
    """End the actor (its worker process killed by its node), whether it answers or not, then
    give its room back. Blocking calls to the cluster: run in a thread, never on the loop."""
    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)
    release()


def _opening_error(ray: Any, exc: BaseException, call_s: float) -> BaseException:
    """What a failed open is to the caller: the node's own error (a bad model spec, a backend
    that cannot run there, an unsafe file name), or why the cluster could not hold it."""
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, Exception):
        return exc.cause
    if isinstance(exc, TimeoutError):
        return SandboxUnavailable(f"no node of the Ray cluster took the session within {OPEN_TIMEOUT_S:g} s "
                                  f"or answered within {call_s:g} s (all busy?)")  # fmt: skip
    if isinstance(exc, ray.exceptions.RayError):
        return SandboxFailed(f"the session could not be opened on the cluster ({first_line(exc)})")
    return exc


def _host_folder(runs_dir: Path, run_name: str) -> Path:
    """The run folder on this machine, named as its node named it: a run folder's name as
    coderoom makes one (`RUN_NAME`: no separator, `..`, control, bidi or hidden name)."""
    if not isinstance(run_name, str) or not RUN_NAME.fullmatch(run_name):
        raise SandboxFailed("the session's node named its run folder with an unsafe name")
    runs_dir.mkdir(parents=True, exist_ok=True)
    folder = runs_dir / run_name
    try:
        folder.mkdir()
    except OSError as exc:
        raise RunFolderUnavailable(f"the session's run folder {folder} could not be made here ({exc.strerror})") from None
    return folder


class RaySession(Activity):
    """A live session held by a Ray actor on a cluster node (see the module's docstring); the
    calls are `Session`'s (`holder.LiveSession`)."""

    max_read_bytes = MAX_READ_BYTES

    def __init__(
        self, ray: Any, actor: Any, run_dir: Path, limits: Limits, place: tuple[str, str], release: Callable[[], None],
        *, model_s: float = DEFAULT_TIMEOUT_S, progress: Callable[[], Any] | None = None, call_s: float = CALL_S,
    ) -> None:
        """`release`: gives the actor's room on its node back, once the actor is ended.
        `progress`: gives the `ProgressBox` actor its node sends its replies' progress to
        (`RayOpener.progress_box`: blocking, made at the first ask); none: no progress.
        `call_s`: a small call's deadline (`RayOpener`'s)."""
        super().__init__(EventHub())
        self._release = release
        self.id = secrets.token_urlsafe(16)
        self.run_dir = run_dir
        self.limits = limits
        self.node, self.host = place
        self.lost: str | None = None
        self._model_s = model_s  # the node's deadline on one model call (`models.base.client_settings`)
        self.call_s = call_s
        self.tail_s = TAIL_WAIT_S + call_s  # the follower's heartbeat: a stopped actor is found within it
        self._ray = ray
        self._actor = actor
        self._offset = 0  # of the node's record, read so far
        self._copied = 0  # bytes of it copied here
        self._count = 0  # events of it copied here
        self._last_t = 0.0
        self._ended = False  # the record here has its run_end
        self._follower: asyncio.Task[None] | None = None
        self._close_lock = asyncio.Lock()
        self._asks = asyncio.Lock()  # the node runs them one at a time: queued here (see the module's docstring)
        self._cells = asyncio.Lock()  # the client's cells, likewise
        self._ask_until = 0.0  # the deadline of the ask in flight (monotonic), 0 when none
        self._progress = progress
        self._key = secrets.token_hex(16)  # the session's place in the box
        self._replying = False  # the record is between a model_start and what ends its reply

    # -- state (`closed`, `busy`, `idle_for`, `subscribe`: see Activity) ----------------

    def _check_open(self) -> None:
        if self.lost is not None:
            raise SessionLost(self._lost_message())
        if self._closed:
            raise SessionClosed(f"session {self.id} is closed; its record is in {self.run_dir}")

    def _lost_message(self) -> str:
        return lost_message(self.id, self.lost or "", self.run_dir)

    # -- calls ---------------------------------------------------------------------------

    async def _call(self, method: str, *args: Any, use: bool = True) -> Any:
        self._check_open()
        if use:
            self._active += 1
        try:
            return await self._remote(method, *args)
        finally:
            if use:
                self._active -= 1
                self.last_used = time.monotonic()

    def _deadline(self, method: str, args: tuple[Any, ...]) -> float:
        """How long a call to `method` (with `args`) may take before the session counts as lost:
        the bound the node keeps itself plus MARGIN_S, or `call_s` for a call that waits on no
        sandbox. Only the asked method's bound is worked out: another's may not fit these args."""
        timeout = self.limits.timeout  # one command in the sandbox
        match method:
            case "ask":  # its turns: a model call, a command, and a client's cell its own may wait behind
                return MAX_TURNS * (self._model_s + timeout + self._cell_s()) + MARGIN_S
            case "run_python":  # and the agent's cells it may wait behind: the ask in flight's
                return self._cell_s() + MARGIN_S + max(0.0, self._ask_until - time.monotonic())
            case "exec":  # its own timeout, within the session's
                asked = args[1] if len(args) > 1 else None
                return min(asked or timeout, timeout) + MARGIN_S
            case "files":  # the listing, tried again once
                return 2 * timeout + MARGIN_S
            case "read_file" | "write_file":
                return timeout + MARGIN_S
            case "tail":
                return self.tail_s
            case "close":
                return CLOSE_S
            case _:
                return self.call_s

    def _cell_s(self) -> float:
        """A cell's own bound on the node: its timeout, a kernel restarted first."""
        return cell_timeout(self.limits.timeout) + START_WAIT_S

    async def _remote(self, method: str, *args: Any) -> Any:
        """One actor call: its result, the node's own exception, or SessionLost when the actor
        died (its node lost, its process killed) or gave no answer within the call's deadline
        (`_deadline`: then it is killed). A cancelled caller cancels the call on the node (a
        cell is interrupted there, as on one machine)."""
        ray = self._ray
        bound = self._deadline(method, args)
        ref = getattr(self._actor, method).remote(*args)
        try:
            return await asyncio.wait_for(_awaited(ref), bound)
        except TimeoutError:
            raise self._lose(f"its Ray actor on node {self.node[:12]} ({self.host}) gave no answer within {bound:g} s "
                             f"(to {method}); it was ended") from None  # fmt: skip
        except asyncio.CancelledError:
            asyncio.get_running_loop().run_in_executor(None, _cancel, ray, ref)
            raise
        except ray.exceptions.RayActorError as exc:
            why: str | None = first_line(exc)
            if isinstance(exc, ray.exceptions.ActorUnavailableError):
                why = await self._gone()
                if why is None:
                    raise SandboxFailed(
                        f"session {self.id}: the call was cut off by the cluster and may or may not have run "
                        f"({first_line(exc)}); the session is still there"
                    ) from None
            raise self._lose(f"its Ray actor on node {self.node[:12]} ({self.host}) died ({why})") from None
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, CoderoomError):
                raise exc.cause from None
            raise SandboxFailed(f"session {self.id}: its node failed the call ({first_line(exc)})") from None
        except ray.exceptions.RayError as exc:
            raise SandboxFailed(f"session {self.id}: the cluster failed the call ({first_line(exc)})") from None

    async def _gone(self) -> str | None:
        """After Ray's "actor unavailable" (a connection to it dropped: its node going away, or a
        blip): None when the actor answers again, else why it is gone (Ray's "died", once it
        knows the node is lost, or no answer either way for CONFIRM_S)."""
        deadline = time.monotonic() + CONFIRM_S
        while time.monotonic() < deadline and self.lost is None:
            try:
                await asyncio.wait_for(_awaited(self._actor.place.remote()), CONFIRM_S)
                return None
            except self._ray.exceptions.ActorUnavailableError:
                await asyncio.sleep(1.0)
            except self._ray.exceptions.RayError as exc:
                return first_line(exc)
            except TimeoutError:
                break
        return self.lost or f"it did not answer for {CONFIRM_S:g} s"

    async def ask(self, request: str) -> AskResult:
        """The node's ask (one at a time, queued here), its replies' progress relayed to the
        subscribers meanwhile."""
        async with self._asks:
            self._ask_until = time.monotonic() + self._deadline("ask", (request,))
            try:
                return await self._relayed_ask(request)
            finally:
                self._ask_until = 0.0

    async def _relayed_ask(self, request: str) -> AskResult:
        if self._progress is None:
            result: AskResult = await self._call("ask", request)
            return result
        key = self._key
        try:  # the session's place in the box, made before its node can report (R-D2): only while it asks
            box, token = await asyncio.wait_for(asyncio.to_thread(self._progress), self.call_s)
            await asyncio.wait_for(_awaited(box.open.remote(key, token)), self.call_s)
        except (TimeoutError, self._ray.exceptions.RayError):  # no box: the ask goes on, unrelayed
            result = await self._call("ask", request)
            return result
        relay = asyncio.ensure_future(relay_reports(box, key, [self._streamed], self._ray.exceptions.RayError))
        try:
            result = await self._call("ask", request, (box, key))
        finally:
            relay.cancel()
            box.close.remote(key, token)  # what came after the last relay: forgotten, not awaited
        return result

    def _streamed(self, event: Event) -> None:
        """A relayed report: published while the record says a reply is on its way (a report
        from before its model_start or after its end is late, and dropped)."""
        if isinstance(event, ModelStream) and self._replying and not self._closed:
            self._hub.publish(event)

    async def run_python(self, code: str) -> CellResult:
        async with self._cells:
            result: CellResult = await self._call("run_python", code)
        return result

    async def interrupt(self) -> bool:
        return bool(await self._call("interrupt", use=False))

    async def stop(self) -> Literal["ask", "cell"] | None:
        stopped: Literal["ask", "cell"] | None = await self._call("stop", use=False)
        return stopped

    async def exec(self, command: str, timeout: float | None = None) -> CommandResult:
        check_command_timeout(timeout)  # before `_deadline` reads it
        result: CommandResult = await self._call("exec", command, timeout)
        return result

    async def write_file(self, path: str, data: bytes) -> None:
        await self._call("write_file", path, data)

    async def read_file(self, path: str, max_bytes: int = MAX_READ_BYTES, *, head: bool = False) -> bytes:
        return bytes(await self._call("read_file", path, max_bytes, head))

    async def files(self, *, quiet: bool = False) -> list[FileInfo]:
        found: list[FileInfo] = await self._call("files", quiet, use=not quiet)
        return found

    # -- the record, followed --------------------------------------------------------------

    async def follow(self) -> None:
        """Copy the record so far (its run_start), then follow it in the background."""
        self._copy(await self._remote("tail", 0))
        self._follower = asyncio.ensure_future(self._follow())

    async def _follow(self) -> None:
        while not self._ended:
            try:
                self._copy(await self._remote("tail", self._offset))
            except SessionClosed:  # lost (said by `_lose`), or the node's session gone after its close
                return
            except CoderoomError:  # a tail cut off by a blip, its actor still there: ask again
                await asyncio.sleep(1.0)

    def _copy(self, data: bytes) -> None:
        """The node's record lines: each checked as an event, copied into the run folder here
        (within the record's own bounds) and published to the session's subscribers."""
        self._offset += len(data)
        events: list[Event] = []
        for line in data.splitlines():
            event = _event(line)
            if event is not None:
                events.append(event)
        self._append(events)

    def _append(self, events: list[Event], *, end_room: bool = True) -> None:
        """Append within the reader's bounds (MAX_RECORD_BYTES, MAX_EVENTS), so the copy stays a
        readable record; the node's lines leave room (`end_room`) for the run_end "lost" that
        `_lose` appends, so a lost session's record always says how it ended."""
        room_bytes = MAX_RECORD_BYTES - (END_ROOM_BYTES if end_room else 0)
        room_events = MAX_EVENTS - (1 if end_room else 0)
        lines = []
        for event in events:
            text = encode(event)
            if self._ended or self._copied + len(text) > room_bytes or self._count >= room_events:
                break
            lines.append(text)
            self._copied += len(text)
            self._count += 1
            self._last_t = max(self._last_t, event.t)
            self._ended = event.type == "run_end"
            self._replying = isinstance(event, ModelStart) or (self._replying and event.type in STILL_REPLYING)
        with contextlib.suppress(OSError):  # a full disk here: the page still streams; the close says more
            with (self.run_dir / RECORD_FILE).open("a", encoding="ascii") as record:
                record.write("".join(lines))
        for event in events[: len(lines)]:
            self._hub.publish(event)  # type: ignore[arg-type]
        if self._ended:
            self._hub.close()

    def _lose(self, cause: str) -> SessionLost:
        """The actor is gone: the record here is ended 'lost' with the cause (unless the node had
        ended it), the session is closed, and its callers get SessionLost."""
        if self.lost is None:
            self.lost = cause
            self._closed = True
            if not self._ended:
                end = RunEnd(t=self._last_t, status="lost", error=f"the session was lost: {cause}", cause=cause,
                             saved=[RECORD_FILE] if self._copied else [])  # fmt: skip
                self._append([end], end_room=False)  # type: ignore[list-item]
            self._hub.close()
            if self._follower is not None and self._follower is not asyncio.current_task():
                self._follower.cancel()
            asyncio.get_running_loop().run_in_executor(None, _end, self._ray, self._actor, self._release)
            print(f"coderoom: session {self.id} lost: {cause}; its record so far: {self.run_dir}", file=sys.stderr, flush=True)
        return SessionLost(self._lost_message())

    # -- the end ---------------------------------------------------------------------------

    async def close(self, *, keep_unsaved: bool = True) -> Path:
        """Close and save the session on its node as on one machine, then bring its run folder
        here through the exit policy in place of the copy; the actor is ended. Idempotent. A
        save the node's disk refused (SaveFailed, with `keep_unsaved`) leaves it open.

        A caller cancelled meanwhile (a client's cancel of its close, the manager's reaper at
        shutdown) does not stop the close: cut short, it left the actor alive holding its node's
        cpus for the server's life, the session already counted closed (a later close returned
        at once), its run folder never brought back."""
        closing = asyncio.ensure_future(self._close(keep_unsaved))
        try:
            return await asyncio.shield(closing)
        except asyncio.CancelledError:
            closing.add_done_callback(_retrieved)
            raise

    async def _close(self, keep_unsaved: bool) -> Path:
        async with self._close_lock:
            if self.lost is not None:
                raise SessionLost(self._lost_message())
            if self._closed:
                return self.run_dir
            self._closed = True
            try:
                folder, problem = await self._remote("close", keep_unsaved)
            except SaveFailed:
                if keep_unsaved:
                    self._closed = False  # open as it was, its files in the sandbox: a close later saves them
                else:
                    await self._end_actor()
                raise
            await self._last_lines()
            try:
                if folder is not None:
                    await asyncio.to_thread(self._bring_back, folder)
            finally:
                self._hub.close()
                await self._end_actor()
            if problem is not None:
                raise SandboxFailed(f"session {self.id} was closed: {problem}; its record is in {self.run_dir}")
        return self.run_dir

    async def _last_lines(self) -> None:
        if self._follower is None:
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._follower), CLOSE_TAIL_S)
        self._follower.cancel()

    def _bring_back(self, folder: bytes) -> None:
        """The node's run folder, extracted (exit policy) beside the copy, then put in its place."""
        staging = Path(tempfile.mkdtemp(prefix=".coderoom-incoming-", dir=self.run_dir.parent))
        try:
            unpack_run_folder(folder, staging / "run")
            for entry in (staging / "run").iterdir():
                os.replace(entry, self.run_dir / entry.name)
        except (OSError, ArchiveError, WorkspaceLimitError) as exc:
            raise SandboxFailed(
                f"session {self.id} was closed on its node, but its run folder could not be brought here ({exc}); "
                f"its record is in {self.run_dir}"
            ) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    async def _end_actor(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(_awaited(self._actor.remove.remote()), CLEANUP_S)
        await asyncio.to_thread(_end, self._ray, self._actor, self._release)


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A close nobody waits for any more: its outcome is taken (and said on stderr by `_lose`
    when the node was lost), not left for asyncio to report as never retrieved."""
    if not task.cancelled():
        task.exception()


def _event(line: bytes) -> Event | None:
    """One of the node's record lines as an event, or None (too long, not JSON, not an event of
    this version): what the node sends is checked here as a record read from disk is."""
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return None
    kind = raw.get("type") if isinstance(raw, dict) else None
    model = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        return None
    try:
        return model.model_validate(raw)  # type: ignore[return-value]
    except ValidationError:
        return None
