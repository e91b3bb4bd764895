"""One run of a job: sandbox session, agent, output checks with a nudge, artifacts, record.

The steps every run takes (record, sandbox, inputs, save, close, run_end) and how a failure,
a cancel or a signal ends them are `lifecycle.RunLifecycle`'s; here is what a one-shot run does
between them: the agent's turns, a nudge for missing outputs, the output checks. Nothing here
knows about the terminal; progress reaches the CLI as record events.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agents import Runner
from agents.exceptions import MaxTurnsExceeded

from .agent import build_agent, build_run_config
from .artifacts import check_in_session, saved_checks
from .errors import RunDirInUse
from .jobs import Job
from .lifecycle import RunLifecycle, RunResult
from .models import ResolvedModel, resolve_model
from .models.nudge import nudge_message
from .record import Listener, Recorder
from .record.hooks import RecordingHooks
from .workspace import stage_inputs

MAX_NUDGES = 2
DECLINED = "the model could not serve this request (see its final message)"


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


async def run_job(
    job: Job,
    *,
    run_dir: Path | None = None,
    listeners: list[Listener] | None = None,
    environ: dict[str, str] | None = None,
    model: ResolvedModel | None = None,
    inputs_from: Mapping[str, Path] | None = None,
) -> RunResult:
    """Run `job` to completion and save its artifacts and record in `run_dir`.

    `model` overrides the job's model spec (tests pass a scripted model this way). Without
    `run_dir`, a fresh one is made under runs/ (`new_run_dir`). `inputs_from`: where this
    machine reads the job's inputs when not at the job's own host paths (a cluster node's copy
    of the driver's files); the record keeps the job as given.
    """
    if run_dir is not None and run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        # Old artifacts there could pass the output checks for this run.
        raise RunDirInUse(f"{run_dir} already exists and is not empty; choose a new --out folder")
    # a bad model spec is a usage error, found before the run folder exists
    model = model or resolve_model(job.model or None, environ=environ)
    lifecycle = await RunLifecycle.begin(run_dir or new_run_dir(job), job, model, listeners or [])
    async with lifecycle.steps(end=True, raise_errors=False):
        session = await lifecycle.start_sandbox()
        # an empty manifest: inputs are copied in here, never granted as host paths
        await lifecycle.stage(stage_inputs(session, dict(inputs_from or job.inputs)))
        await _drive_agent(job, model, lifecycle)
        await lifecycle.save()  # whatever the agent did, keep what it produced so far
        _judge_outputs(job, lifecycle.result)
    return lifecycle.result


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


async def _drive_agent(job: Job, model: ResolvedModel, lifecycle: RunLifecycle) -> None:
    """The agent's turns, with a nudge (at most MAX_NUDGES) while required outputs are missing."""
    result, session = lifecycle.result, lifecycle.session
    rig = AgentRig.build(job, model, lifecycle.recorder, session)
    run_input: str | list[Any] = job.prompt
    try:
        for attempt in range(MAX_NUDGES + 1):
            remaining = job.max_turns - rig.hooks.turn
            if remaining <= 0:
                break
            outcome = await rig.turns(run_input, remaining)
            result.final_output = str(outcome.final_output or "")
            # a model that says the request is outside what it does (the offline analyst)
            # gets no nudge: the same request would get the same answer
            if model.declined():
                result.error = DECLINED
                break
            checks = await check_in_session(session, job.outputs)
            problems = [c for c in checks if not c.ok]
            if not problems or attempt == MAX_NUDGES:
                break
            lifecycle.recorder.emit("nudge", missing=[{"path": c.path, "reason": c.detail} for c in problems])
            run_input = outcome.to_input_list() + [{"role": "user", "content": nudge_message(problems)}]
    except MaxTurnsExceeded:
        result.error = f"the agent used all {job.max_turns} turns"


def _judge_outputs(job: Job, result: RunResult) -> None:
    """The run's status from the saved outputs (and whether the model declined)."""
    result.checks = saved_checks(result.run_dir, job.outputs, result.saved.refused)
    failed = [c for c in result.checks if not c.ok]
    result.status = "failed" if failed or result.error == DECLINED else "ok"
    if failed and result.error is None:
        result.error = "required outputs missing or invalid: " + "; ".join(
            f"{c.path} ({c.detail})" for c in failed
        )
