"""Run a batch on this machine: each job in its own sandbox and run folder, at most N at once.

`run_one` runs one job and returns a `JobOutcome`: plain, small and serialisable, so the same
function runs where the batch is not (a Ray task, `cluster` and `on_node`) and sends only that
back. `run_batch` schedules the jobs as asyncio tasks bounded by a semaphore, each through a
`JobRunner` (here, or on a cluster), and keeps batch.jsonl (`ledger`).

Each job goes through `run.run_job`, the one run lifecycle: a signal cancels every running job,
each saves its workspace and ends its record "interrupted" as `coderoom run` does, and its line
in batch.jsonl says so with the signal's name; jobs not started yet are left unstarted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol, cast, get_args

from ..errors import CoderoomError, UsageError
from ..models import resolve_model
from ..models.budget import LocalBudget, ModelBudget
from ..record.events import Event, Listener, RunEnd
from ..run import new_run_dir, run_job
from .ledger import LEDGER_FILE, JobEnded, JobStarted, Ledger, Status, bounded_error, read_ledger
from .manifest import BatchEntry


@dataclass(frozen=True)
class LostAttempt:
    """An attempt of a job whose node was lost mid-job (`--ray`): its partial record is in
    `run_dir`, and the job ran again elsewhere."""

    run_dir: str
    node: str
    host: str


@dataclass(frozen=True)
class JobOutcome:
    """How one job ended. `earlier`: it finished ok in an earlier attempt of this batch
    (`--resume`) and did not run now."""

    key: str
    run_dir: str  # the run folder's name, under the batch's folder
    status: Status
    duration_s: float = 0.0
    outputs_ok: int = 0
    outputs: int = 0
    tokens: int = 0
    error: str | None = None
    signal: str | None = None
    earlier: bool = False
    node: str | None = None  # on a cluster (`--ray`): the Ray node that ran it, and its address
    host: str | None = None
    lost: tuple[LostAttempt, ...] = ()  # attempts on nodes lost mid-job, kept beside this run

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class BatchWatcher(Protocol):
    """What follows a batch as it goes (the CLI's progress display)."""

    def job_started(self, entry: BatchEntry, run_dir: Path) -> None: ...

    def job_ended(self, outcome: JobOutcome) -> None: ...


class EndOfRun:
    """A record listener that keeps the run's run_end: how the run ended, also when it was
    cancelled (run_job then raises instead of returning)."""

    def __init__(self) -> None:
        self.event: RunEnd | None = None
        self.before = "interrupted before the run began"  # what a cancel before run_end says

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunEnd):
            self.event = event

    def outcome(self, key: str, run_dir: Path) -> JobOutcome:
        end = self.event
        if end is None:  # cancelled before its record began
            return JobOutcome(key, run_dir.name, "interrupted", error=self.before)
        status = cast(Status, end.status) if end.status in get_args(Status) else "error"
        return JobOutcome(
            key, run_dir.name, status, duration_s=end.duration_s,
            outputs_ok=sum(1 for check in end.outputs if check.ok), outputs=len(end.outputs),
            tokens=end.usage.total_tokens, error=bounded_error(end.error), signal=end.signal,
        )  # fmt: skip


async def run_one(
    entry: BatchEntry,
    run_dir: Path,
    environ: Mapping[str, str],
    end: EndOfRun | None = None,
    listeners: Sequence[Listener] = (),
    inputs_from: Mapping[str, Path] | None = None,
    budget: ModelBudget | None = None,
) -> JobOutcome:
    """Run one job into `run_dir` (fresh, empty) and say how it ended; `listeners` see each
    record event as it is written, `inputs_from` is where its inputs are read here (on a
    cluster node: the events sent on to the driver, the inputs the node's copy); its model
    requests hold slots of `budget`, shared by the batch's jobs (`--model-concurrency`)."""
    end = end or EndOfRun()
    try:
        model = resolve_model(entry.job.model or None, environ=environ)
        model.budget = budget
        await run_job(
            entry.job, run_dir=run_dir, listeners=[end, *listeners], environ=dict(environ), model=model,
            inputs_from=inputs_from,
        )
    except CoderoomError as exc:  # before its record began: a run folder that cannot be written
        return JobOutcome(entry.key, run_dir.name, "error", error=bounded_error(exc.message))
    return end.outcome(entry.key, run_dir)


async def check_models(entries: Iterable[BatchEntry], environ: Mapping[str, str]) -> None:
    """Resolve each model spec the jobs name once (then let it go): a bad one is a usage error
    before the batch's folder is written, not a failure of every job."""
    for spec in {entry.job.model for entry in entries}:
        await resolve_model(spec or None, environ=environ).aclose()


@dataclass(frozen=True)
class BatchPlan:
    """The jobs to run now, and those an earlier attempt finished ok (`--resume`)."""

    to_run: list[BatchEntry]
    earlier: list[JobOutcome]


def plan_batch(entries: list[BatchEntry], out: Path, *, resume: bool) -> BatchPlan:
    """What runs: every job; with `resume`, every job but those whose last end in out/batch.jsonl
    was ok with the same settings. Usage errors, before anything is written."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: not a folder")
    ledger = out / LEDGER_FILE
    if not resume:
        if ledger.exists():
            raise UsageError(f"{out} holds a batch already ({LEDGER_FILE}); add --resume to go on with it, or choose another --out")
        return BatchPlan(list(entries), [])
    if not ledger.is_file():
        raise UsageError(f"--resume: {out} holds no {LEDGER_FILE} to go on from")
    last_end = {line.job: line for line in read_ledger(out) if isinstance(line, JobEnded)}
    to_run, earlier = [], []
    for entry in entries:
        end = last_end.get(entry.key)
        if end is not None and end.status == "ok" and end.digest == entry.digest:
            earlier.append(JobOutcome(
                entry.key, end.run_dir, "ok", end.duration_s, end.outputs_ok, end.outputs, end.tokens, earlier=True
            ))  # fmt: skip
        else:
            to_run.append(entry)
    return BatchPlan(to_run, earlier)


JobRunner = Callable[[BatchEntry, Path, EndOfRun], Awaitable[JobOutcome]]
"""Runs one job into its run folder (fresh, empty, under the batch's folder): here (`run_one`)
or on a cluster node (`cluster.RayJobs`). On a cancel it raises, `EndOfRun` saying how far it got."""


def here(environ: Mapping[str, str], model_concurrency: int | None = None) -> JobRunner:
    """Each job on this machine; with `model_concurrency`, at most that many model requests in
    flight among them all."""
    budget = LocalBudget(model_concurrency) if model_concurrency is not None else None

    def run(entry: BatchEntry, run_dir: Path, end: EndOfRun) -> Awaitable[JobOutcome]:
        return run_one(entry, run_dir, environ, end, budget=budget)

    return run


async def run_batch(
    plan: BatchPlan, out: Path, *, parallel: int, run: JobRunner, watcher: BatchWatcher
) -> list[JobOutcome]:
    """Run the plan's jobs, at most `parallel` at once; every outcome, the earlier ones first."""
    out.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(out)
    slots = asyncio.Semaphore(parallel)
    outcomes = list(plan.earlier)

    async def one(entry: BatchEntry) -> None:
        async with slots:
            run_dir = new_run_dir(entry.job, base=out)
            ledger.write(JobStarted(job=entry.key, digest=entry.digest, run_dir=run_dir.name, t=time.time()))
            watcher.job_started(entry, run_dir)
            end = EndOfRun()
            try:
                outcome = await run(entry, run_dir, end)
            except asyncio.CancelledError:
                _finish(entry, end.outcome(entry.key, run_dir))
                raise
            _finish(entry, outcome)

    def _finish(entry: BatchEntry, outcome: JobOutcome) -> None:
        outcomes.append(outcome)
        fields = {k: v for k, v in outcome.as_dict().items() if k not in ("key", "earlier")}
        fields["lost"] = [asdict(lost) for lost in outcome.lost]
        ledger.write(JobEnded.model_validate({**fields, "job": entry.key, "digest": entry.digest, "t": time.time()}))
        watcher.job_ended(outcome)

    try:
        await _all_of([asyncio.create_task(one(entry)) for entry in plan.to_run])
    finally:
        ledger.close()
    return outcomes


async def _all_of(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Wait for every task. A cancel (a signal) is passed on to each still running, as often as
    it comes (a second signal cuts their saves, as in `coderoom run`), and they are still awaited
    to their end before the cancel goes on; a task's own exception (a bug) is raised after."""
    tasks = list(tasks)
    pending = set(tasks)
    cancelled = False
    while pending:
        try:
            _, pending = await asyncio.wait(pending)
        except asyncio.CancelledError:
            cancelled = True
            for task in pending:
                task.cancel()
    if cancelled:
        raise asyncio.CancelledError
    for task in tasks:
        task.result()
