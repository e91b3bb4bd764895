"""One run's lifecycle, the same for a one-shot run (`run.run_job`, and so MCP's run_job) and a
live session (`service.Session`): open the record, start the sandbox, stage the inputs, run,
save, close the sandbox, end the record.

Why one: the surfaces wrote these steps twice and drifted (cleanup by hand at three places of a
session's open, the "interrupted by" bookkeeping copied). Each rule of a run's end lives here:

- run_start is the record's first line and run_end its last, however the run ends; the sandbox
  is closed (to its end, even when cancelled again) before run_end is written, so a record that
  ended names no live sandbox;
- once the sandbox has started, its workspace is saved whatever happened, once, within
  SAVE_TIMEOUT_S (a second signal cuts the save: `artifacts.save_workspace`);
- a failure is recorded with the step it happened in (`STEP_FAILURES`), run_end status "error";
- a signal or a cancel at any step is status "interrupted" with the signal's name (`interrupts`);
  before the sandbox started, `incomplete` says that nothing was saved;
- the listeners' end (`on_end`) and the model's HTTP client come last;
- a started sandbox is told which run folder it serves and the run's id (run_start's `run_id`),
  so that if this process dies (kill -9) its workspace is recovered into that folder
  (`sandboxes.orphans.record_run`, `coderoom.recovery`): runs, sessions, MCP and batch alike.

What a run does between the steps (the agent, the output checks) is the surface's.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from .version import __version__
from .artifacts import SaveReport, save_workspace
from .errors import SaveFailed
from .interrupts import received_signal
from .jobs import Job
from .models import ResolvedModel, explain_model_error
from .outputs import OutputCheck
from .record import Listener, Recorder, bounded
from .record.events import Event, ModelCall
from .record.hooks import MAX_MESSAGE_CHARS
from .sandboxes.base import SandboxBackend
from .sandboxes.egress_watch import watch_egress
from .sandboxes.orphans import record_run
from .sandboxes.registry import packages_lock
from .sandboxes.sdk_session_adapter import limits_hit
from .sandboxes.session import HeldSession
from .sandboxes.spec import SandboxSpec

SAVE_TIMEOUT_S = 60.0  # saving the workspace after the agent stopped (or was interrupted)

Status = Literal["ok", "failed", "error", "interrupted"]
Step = Literal["start", "stage", "run", "save", "close"]
STEP_FAILURES: dict[Step, str] = {
    "start": "the sandbox did not start: ",
    "stage": "the inputs were not staged, so the run did not open: ",
    "run": "",  # the agent's own failures read best as they are (a model server's one line)
    "save": "the workspace was not saved: ",
    "close": "the sandbox did not close cleanly: ",
}
NOTHING_SAVED = "interrupted before the sandbox had started: nothing to save"

T = TypeVar("T")
Claim = Callable[[SandboxSpec], Awaitable[HeldSession | None]]


@dataclass
class RunResult:
    status: Status
    run_dir: Path
    checks: list[OutputCheck] = field(default_factory=list)
    final_output: str = ""
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    signal: str | None = None
    saved: SaveReport = field(default_factory=SaveReport)
    limits_hit: list[str] = field(default_factory=list)  # each named with its value

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class RunLifecycle:
    """One run's steps and its end; make one with `await RunLifecycle.begin(...)`.

    The surface calls `start_sandbox`, `stage`, its own work and `save` inside `async with
    lifecycle.steps(...)`, which ends the run on any exception; `end` is idempotent."""

    def __init__(
        self, job: Job, model: ResolvedModel, recorder: Recorder, result: RunResult,
        on_end: Callable[[], None] | None, run_id: str,
    ) -> None:
        self.job = job
        self.run_id = run_id
        self.model = model
        self.recorder = recorder
        self.result = result
        self.pooled = False
        self._on_end = on_end
        self._started = time.monotonic()
        self._sandbox: HeldSession | None = None
        self._failed_in: Step | None = None  # the step whose exception is propagating
        self._saved = False
        self._ended = False

    @classmethod
    async def begin(
        cls, run_dir: Path, job: Job, model: ResolvedModel, listeners: Sequence[Listener] = (),
        *, on_end: Callable[[], None] | None = None,
    ) -> RunLifecycle:
        """Open run_dir's record and write run_start; usage is summed from the model_call events
        into the result, so run_end has it however the run ended. The model is closed (and
        `on_end` called) if even that fails."""
        result = RunResult(status="error", run_dir=run_dir)
        recorder: Recorder | None = None
        run_id = secrets.token_urlsafe(16)
        try:
            recorder = Recorder(run_dir, [*listeners, lambda event: _count_usage(result, event)])
            recorder.emit(
                "run_start", job=job.model_dump(mode="json"), model=model.label, notice=model.notice,
                coderoom_version=__version__, run_id=run_id, environment=packages_lock(job.sandbox),
            )
        except BaseException:
            if recorder is not None:
                with contextlib.suppress(OSError):  # the unwritten line is dropped; the file is closed anyway
                    recorder.close()
            if on_end is not None:
                on_end()
            await model.aclose()
            raise
        return cls(job, model, recorder, result, on_end, run_id)

    @property
    def run_dir(self) -> Path:
        return self.result.run_dir

    @property
    def session(self) -> Any:
        """The started sandbox's SDK session."""
        if self._sandbox is None:
            raise RuntimeError("the sandbox has not started")
        return self._sandbox.session

    # -- the steps -----------------------------------------------------------------------

    @contextmanager
    def _doing(self, step: Step) -> Iterator[None]:
        """A step of the lifecycle's own: an exception out of it is named by it (`failed`)."""
        try:
            yield
        except BaseException:
            self._failed_in = step
            raise

    async def start_sandbox(self, claim: Claim | None = None, backend: SandboxBackend | None = None) -> Any:
        """Start the job's sandbox (or take one `claim` hands over, a warm pool's); its session.
        `backend`: an object to use instead of the registry's (tests hand in the fake). Once
        started, the sandbox records this run's folder and id: where its workspace is recovered
        to if this process dies before `end`."""
        with self._doing("start"):
            held = await claim(self.job.sandbox) if claim is not None else None
            self.pooled = held is not None
            self._sandbox = held or await HeldSession.start(self.job.sandbox, backend)
        record_run(self._sandbox.session, self.run_dir, self.run_id)
        watch_egress(self._sandbox.session, self._record_egress)
        return self._sandbox.session

    def _record_egress(self, fields: dict[str, object]) -> None:
        """One connection attempt of the sandbox through its allowlist's proxy, into the record."""
        self.recorder.emit("egress", **fields)

    async def stage(self, staging: Awaitable[T]) -> T:
        """Await the surface's copying of its inputs into the started sandbox."""
        with self._doing("stage"):
            return await staging

    async def save(self) -> None:
        """Save the workspace into the run folder, once, if the sandbox started; refusals become
        record events, a save over SAVE_TIMEOUT_S is stopped and marked incomplete."""
        if self._sandbox is None or self._saved:
            return
        self._saved = True
        with self._doing("save"):
            session, report = self._sandbox.session, self.result.saved
            self.result.limits_hit = limits_hit(session)
            try:
                async with asyncio.timeout(SAVE_TIMEOUT_S):
                    await save_workspace(session, self.run_dir, self.job.sandbox.limits.workspace_size,
                                         self.job.outputs, into=report)
            except TimeoutError:
                report.incomplete = f"the save took longer than {SAVE_TIMEOUT_S:g} s (SAVE_TIMEOUT_S) and was stopped"
            finally:
                for note in report.notes:
                    self.recorder.emit("extract_refused", detail=note)

    async def save_or_stay_open(self) -> None:
        """`save`, except that a save the host's disk refused (SaveFailed) leaves the run open
        and unsaved, so that a later save, once space returns, can try again: a live session's
        close keeps the session rather than lose its files."""
        try:
            await self.save()
        except SaveFailed:
            self._saved, self._failed_in = False, None
            self.result.saved = SaveReport()
            raise

    # -- how it ended ----------------------------------------------------------------------

    def interrupted(self) -> None:
        """Mark the run interrupted: by the signal this process received, or a plain cancel."""
        result, self._failed_in = self.result, None
        result.status, result.signal = "interrupted", received_signal()
        result.error = f"interrupted by {result.signal}" if result.signal else "interrupted"
        if self._sandbox is None and not result.saved.incomplete:
            result.saved.incomplete = NOTHING_SAVED

    def failed(self, exc: BaseException) -> None:
        """Mark the run failed by `exc`, named with the step it happened in."""
        step, self._failed_in = self._failed_in or "run", None
        self.result.status = "error"
        self.result.error = STEP_FAILURES[step] + (explain_model_error(exc) or f"{type(exc).__name__}: {exc}")

    @asynccontextmanager
    async def steps(self, *, end: bool, raise_errors: bool = True) -> AsyncIterator[None]:
        """Steps of the run: an exception in them ends the run here (marked, saved, closed,
        run_end) and propagates (an error only with `raise_errors`; a cancel or
        KeyboardInterrupt always); with `end` a run whose steps all passed ends here too."""
        try:
            yield
        except (KeyboardInterrupt, asyncio.CancelledError):
            self.interrupted()
            await self.end()
            raise
        except Exception as exc:
            self.failed(exc)
            await self.end()
            if raise_errors:
                raise
            return
        if end:
            await self.end()

    async def end(self) -> RunResult:
        """Save (if not yet saved), close the sandbox, write run_end, call `on_end`, close the
        model. Idempotent. A cancel meanwhile cuts the save only, and is re-raised."""
        if self._ended:
            return self.result
        self._ended = True
        try:
            try:
                await self.save()
            finally:
                if self._sandbox is not None:
                    with self._doing("close"):
                        await self._sandbox.aclose()
        except asyncio.CancelledError:
            self.interrupted()
            raise
        except Exception as exc:
            self.failed(exc)
        finally:
            self._end_record()
            if self._on_end is not None:
                self._on_end()
            await self.model.aclose()
        return self.result

    def _end_record(self) -> None:
        result = self.result
        self.recorder.emit(
            "run_end",
            status=result.status,
            final_output=bounded(result.final_output, MAX_MESSAGE_CHARS),
            error=result.error,
            outputs=[vars(c) for c in result.checks],
            signal=result.signal,
            saved=result.saved.saved,
            incomplete=result.saved.incomplete,
            limits_hit=result.limits_hit,
            usage=result.usage,
            duration_s=round(time.monotonic() - self._started, 3),
        )
        self.recorder.close()


def _count_usage(result: RunResult, event: Event) -> None:
    if isinstance(event, ModelCall):
        for name, value in event.usage.model_dump().items():
            result.usage[name] = result.usage.get(name, 0) + value
