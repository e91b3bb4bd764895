"""One run of a job: sandbox session, agent, output checks with a nudge, artifacts, record.

The session is always closed and deleted (success, error, Ctrl-C): `open_session` owns that.
Nothing here knows about the terminal; progress reaches the CLI as record events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from agents import Runner
from agents.exceptions import MaxTurnsExceeded

from . import __version__
from .jobs import Job
from .models import ResolvedModel, explain_model_error, resolve_model
from .agent import build_agent, build_run_config
from .artifacts import check_in_session, check_on_host, save_workspace
from .errors import RunDirInUse
from .outputs import OutputCheck
from .record import Listener, Recorder
from .record.hooks import RecordingHooks
from .sandboxes.session import open_session
from .workspace import stage_inputs

MAX_NUDGES = 2

Status = Literal["ok", "failed", "error", "interrupted"]


@dataclass
class RunResult:
    status: Status
    run_dir: Path
    checks: list[OutputCheck] = field(default_factory=list)
    final_output: str = ""
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def default_run_dir(job: Job, base: Path = Path("runs")) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    candidate = base / f"{job.name}-{stamp}"
    suffix = 1
    while candidate.exists():
        suffix += 1
        candidate = base / f"{job.name}-{stamp}-{suffix}"
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

    `model` overrides the job's model spec (tests pass a scripted model this way).
    """
    run_dir = run_dir or default_run_dir(job)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        # Old artifacts there could pass the output checks for this run.
        raise RunDirInUse(f"{run_dir} already exists and is not empty; choose a new --out folder")
    # a bad model spec is a usage error, found before the run folder exists
    resolved = model = model or resolve_model(job.model or None, environ=environ)
    result = RunResult(status="error", run_dir=run_dir)
    # usage is summed from the model_call events, so run_end has it however the run ended
    recorder = Recorder(run_dir, [*(listeners or []), lambda event: _count_usage(result, event)])
    started = time.monotonic()
    try:
        recorder.emit(
            "run_start",
            job=job.model_dump(mode="json"),
            model=model.label,
            notice=model.notice,
            coderoom_version=__version__,
        )
        await _run_in_sandbox(job, model, run_dir, recorder, result)
    except (KeyboardInterrupt, asyncio.CancelledError):
        result.status, result.error = "interrupted", "interrupted by the user"
        raise
    except Exception as exc:
        result.status = "error"
        result.error = explain_model_error(exc) or f"{type(exc).__name__}: {exc}"
    finally:
        recorder.emit(
            "run_end",
            status=result.status,
            final_output=result.final_output,
            error=result.error,
            outputs=[vars(c) for c in result.checks],
            usage=result.usage,
            duration_s=round(time.monotonic() - started, 3),
        )
        recorder.close()
        await resolved.aclose()
    return result


async def _run_in_sandbox(
    job: Job, model: ResolvedModel, run_dir: Path, recorder: Recorder, result: RunResult
) -> None:
    agent = build_agent(job, model, recorder.emit)
    hooks = RecordingHooks(recorder)
    async with open_session(job.sandbox, agent.default_manifest) as session:
        await stage_inputs(session, job.inputs)
        run_config = build_run_config(model, session)
        run_input: str | list[Any] = job.prompt
        checks: list[OutputCheck] = []
        try:
            for attempt in range(MAX_NUDGES + 1):
                remaining = job.max_turns - hooks.turn
                if remaining <= 0:
                    break
                outcome = await Runner.run(
                    agent, run_input, max_turns=remaining, hooks=hooks, run_config=run_config
                )
                result.final_output = str(outcome.final_output or "")
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
            # Whatever happened, keep what the agent produced so far.
            notes = await save_workspace(session, run_dir, job.sandbox.limits.workspace_size)
            for note in notes:
                recorder.emit("extract_refused", detail=note)
    result.checks = check_on_host(run_dir, job.outputs)
    failed = [c for c in result.checks if not c.ok]
    result.status = "failed" if failed else "ok"
    if failed and result.error is None:
        result.error = "required outputs missing or invalid: " + "; ".join(
            f"{c.path} ({c.detail})" for c in failed
        )


def _count_usage(result: RunResult, event: dict[str, Any]) -> None:
    if event["type"] == "model_call":
        for name, value in event["usage"].items():
            result.usage[name] = result.usage.get(name, 0) + value
