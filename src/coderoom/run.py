"""One run of a job: sandbox session, agent, output checks with a nudge, artifacts, record.

The session is always closed and deleted (success, error, a signal): `open_session` owns that.
Interrupted (see `interrupts`), the run still saves its workspace, within SAVE_TIMEOUT_S, and
ends its record with run_end status "interrupted", the signal's name, what was saved and, if
the save was cut short, why (`incomplete`). Nothing here knows about the terminal; progress
reaches the CLI as record events.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from agents import Runner
from agents.sandbox import Manifest
from agents.exceptions import MaxTurnsExceeded

from .version import __version__
from .agent import build_agent, build_run_config
from .artifacts import SaveReport, check_in_session, save_workspace, saved_checks
from .errors import RunDirInUse
from .interrupts import received_signal
from .jobs import Job
from .models import ResolvedModel, explain_model_error, resolve_model
from .outputs import OutputCheck
from .record import Listener, Recorder, bounded
from .record.events import Event, ModelCall
from .record.hooks import MAX_MESSAGE_CHARS, RecordingHooks
from .sandboxes.session import open_session
from .sandboxes.stops import limits_hit
from .workspace import stage_inputs

MAX_NUDGES = 2
DECLINED = "the model could not serve this request (see its final message)"
SAVE_TIMEOUT_S = 60.0  # saving the workspace after the agent stopped (or was interrupted)

Status = Literal["ok", "failed", "error", "interrupted"]


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


def new_run_dir(job: Job, base: Path = Path("runs")) -> Path:
    """Create a fresh run folder, `base/NAME-YYYYmmdd-HHMMSS-XXXXXX`, and return it.

    The random suffix and an exclusive mkdir make concurrent runs of one job in the same second
    get different folders; a collision (one in 16 million) just draws again.
    """
    base.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    while True:
        candidate = base / f"{job.name}-{stamp}-{secrets.token_hex(3)}"
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate


def nudge_message(problems: Sequence[OutputCheck]) -> str:
    lines = "\n".join(f"- {c.path}: {c.detail}" for c in problems)
    return (
        "The run is not finished: these required outputs are missing or invalid:\n"
        f"{lines}\nCreate or fix them in the workspace, then reply with a short summary."
    )


async def run_job(
    job: Job,
    *,
    run_dir: Path | None = None,
    listeners: list[Listener] | None = None,
    environ: dict[str, str] | None = None,
    model: ResolvedModel | None = None,
) -> RunResult:
    """Run `job` to completion and save its artifacts and record in `run_dir`.

    `model` overrides the job's model spec (tests pass a scripted model this way). Without
    `run_dir`, a fresh one is made under runs/ (`new_run_dir`).
    """
    if run_dir is not None and run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        # Old artifacts there could pass the output checks for this run.
        raise RunDirInUse(f"{run_dir} already exists and is not empty; choose a new --out folder")
    # a bad model spec is a usage error, found before the run folder exists
    resolved = model = model or resolve_model(job.model or None, environ=environ)
    run_dir = run_dir or new_run_dir(job)
    result = RunResult(status="error", run_dir=run_dir)
    recorder = start_record(run_dir, job, model, listeners or [], result)
    started = time.monotonic()
    try:
        await _run_in_sandbox(job, model, run_dir, recorder, result)
    except (KeyboardInterrupt, asyncio.CancelledError):
        result.status, result.signal = "interrupted", received_signal()
        result.error = f"interrupted by {result.signal}" if result.signal else "interrupted"
        saved = result.saved
        if not (saved.saved or saved.refused or saved.incomplete):
            saved.incomplete = "interrupted before the sandbox had started: nothing to save"
        raise
    except Exception as exc:
        result.status = "error"
        result.error = explain_model_error(exc) or f"{type(exc).__name__}: {exc}"
    finally:
        end_record(recorder, result, started)
        await resolved.aclose()
    return result


def start_record(
    run_dir: Path, job: Job, model: ResolvedModel, listeners: Sequence[Listener], result: RunResult
) -> Recorder:
    """Open run_dir's record and write run_start; usage is summed from the model_call events
    into `result`, so run_end has it however the run (or session) ended."""
    recorder = Recorder(run_dir, [*listeners, lambda event: _count_usage(result, event)])
    try:
        recorder.emit(
            "run_start",
            job=job.model_dump(mode="json"),
            model=model.label,
            notice=model.notice,
            coderoom_version=__version__,
        )
    except BaseException:
        with contextlib.suppress(OSError):  # the unwritten line is dropped; the file is closed anyway
            recorder.close()
        raise
    return recorder


def end_record(recorder: Recorder, result: RunResult, started: float) -> None:
    """Write run_end from `result` and close the record: the last line of every run folder."""
    recorder.emit(
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
        duration_s=round(time.monotonic() - started, 3),
    )
    recorder.close()


@dataclass
class AgentRig:
    """What drives the agent in one sandbox session: the agent, its recording hooks (which
    count turns across calls) and the run config bound to the session. A one-shot run and a
    live session (`coderoom.service`) both take their turns through `turns`."""

    agent: Any
    hooks: RecordingHooks
    run_config: Any

    @classmethod
    def build(cls, job: Job, model: ResolvedModel, recorder: Recorder, session: Any) -> AgentRig:
        agent = build_agent(job, model, recorder.emit)
        return cls(agent, RecordingHooks(recorder), build_run_config(model, session))

    async def turns(self, run_input: str | list[Any], max_turns: int) -> Any:
        """One Runner.run of at most `max_turns` model turns; its result (to_input_list, ...)."""
        return await Runner.run(
            self.agent, run_input, max_turns=max_turns, hooks=self.hooks, run_config=self.run_config
        )


async def _run_in_sandbox(
    job: Job, model: ResolvedModel, run_dir: Path, recorder: Recorder, result: RunResult
) -> None:
    # an empty manifest: inputs are copied in by `stage_inputs`, never granted as host paths
    async with open_session(job.sandbox, Manifest()) as session:
        await stage_inputs(session, job.inputs)
        rig = AgentRig.build(job, model, recorder, session)
        run_input: str | list[Any] = job.prompt
        checks: list[OutputCheck] = []
        try:
            for attempt in range(MAX_NUDGES + 1):
                remaining = job.max_turns - rig.hooks.turn
                if remaining <= 0:
                    break
                outcome = await rig.turns(run_input, remaining)
                result.final_output = str(outcome.final_output or "")
                # a model that says the request is outside what it does (the offline analyst)
                # gets no nudge: the same request would get the same answer
                if getattr(model.model, "declined", None):
                    result.error = DECLINED
                    break
                checks = await check_in_session(session, job.outputs)
                problems = [c for c in checks if not c.ok]
                if not problems or attempt == MAX_NUDGES:
                    break
                recorder.emit("nudge", missing=[{"path": c.path, "reason": c.detail} for c in problems])
                run_input = outcome.to_input_list() + [
                    {"role": "user", "content": nudge_message(problems)}
                ]
        except MaxTurnsExceeded:
            result.error = f"the agent used all {job.max_turns} turns"
        finally:
            result.limits_hit = limits_hit(session)
            # Whatever happened, keep what the agent produced so far.
            await save(session, job, run_dir, recorder, result.saved)
    result.checks = saved_checks(run_dir, job.outputs, result.saved.refused)
    failed = [c for c in result.checks if not c.ok]
    result.status = "failed" if failed or result.error == DECLINED else "ok"
    if failed and result.error is None:
        result.error = "required outputs missing or invalid: " + "; ".join(
            f"{c.path} ({c.detail})" for c in failed
        )


async def save(session: Any, job: Job, run_dir: Path, recorder: Recorder, report: SaveReport) -> None:
    """Save the workspace into run_dir within SAVE_TIMEOUT_S; refusals become record events."""
    limits = job.sandbox.limits
    try:
        async with asyncio.timeout(SAVE_TIMEOUT_S):
            await save_workspace(session, run_dir, limits.workspace_size, job.outputs, into=report)
    except TimeoutError:
        report.incomplete = f"the save took longer than {SAVE_TIMEOUT_S:g} s (SAVE_TIMEOUT_S) and was stopped"
    finally:
        for note in report.notes:
            recorder.emit("extract_refused", detail=note)


def _count_usage(result: RunResult, event: Event) -> None:
    if isinstance(event, ModelCall):
        for name, value in event.usage.model_dump().items():
            result.usage[name] = result.usage.get(name, 0) + value
