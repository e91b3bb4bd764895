"""`coderoom batch`: many jobs, each in its own sandbox and run folder under --out, on this
machine or (`--ray`) on a Ray cluster's nodes, with one progress display, a summary table and
DIR/batch.jsonl (`coderoom.batch`)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from ..sandboxes import backend_names
from ..sandboxes.flags import SandboxFlags
from ..sandboxes.requirements import PACKAGE_HELP
from ..sandboxes.registry import prepare_backend
from .application import app
from .display import safe
from .errors import reported
from .job_overrides import apply_overrides
from .limit_option import Limit

if TYPE_CHECKING:  # pydantic and the Agents SDK load when the command runs
    from ..batch.manifest import BatchEntry
    from ..batch.runner import JobOutcome
    from .batch_progress import BatchProgress

console = Console(stderr=True)
out_console = Console()

MAX_PARALLEL = 64


@app.command()
def batch(
    jobs: Annotated[list[Path], typer.Argument(help="job folders, or one manifest (.csv or .jsonl: name, prompt, inputs, outputs per row)")],
    out: Annotated[Path, typer.Option("--out", help="the batch's folder: a run folder per job and batch.jsonl")],
    parallel: Annotated[int, typer.Option(min=1, max=MAX_PARALLEL, help="jobs running at once (with --ray: sent to the cluster at once)")] = 2,
    job_file: Annotated[Optional[Path], typer.Option("--job-file", help="coderoom.toml whose settings a manifest's rows share")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="go on with the batch in --out: skip jobs that finished ok, retry the others")] = False,
    model: Annotated[Optional[str], typer.Option(help="OpenAI model name, openai-compatible:MODEL@URL, or offline")] = None,
    max_turns: Annotated[Optional[int], typer.Option(help="model turns allowed per job")] = None,
    sandbox: Annotated[Optional[str], typer.Option(help=f"sandbox backend: {' | '.join(backend_names())}")] = None,
    memory: Annotated[Optional[str], typer.Option(help="sandbox memory per job, e.g. 2G")] = None,
    timeout: Annotated[Optional[float], typer.Option(help="seconds per command")] = None,
    limit: Limit = [],
    package: Annotated[list[str], typer.Option("--package", help=PACKAGE_HELP + "; every job's")] = [],
    model_concurrency: Annotated[Optional[int], typer.Option(min=1, help="model requests in flight at once across the whole batch (with --ray: across the cluster), under a provider's rate limit; default: no bound")] = None,
    ray: Annotated[Optional[str], typer.Option("--ray", help="run each job on the Ray cluster at HOST:PORT (or auto: the one on this machine); pip install 'coderoom[ray]'")] = None,
) -> None:
    """Run many jobs, at most --parallel at once, each in its own sandbox and run folder.

    Exit 0 when every job passed, 1 otherwise (the failures listed), 2 for a bad job folder,
    manifest row or flag, or a --ray cluster that cannot be joined (before anything runs). SIGINT, SIGTERM and SIGHUP stop the running
    jobs as `coderoom run` stops one (saved, recorded "interrupted"), exit 130 / 143 / 129.
    """
    import asyncio

    from ..batch.manifest import batch_entries
    from ..interrupts import Interrupted, exit_now, raising_on_signals, run_interruptible
    from .batch_progress import BatchProgress, failure_lines, summary_table

    environ = dict(os.environ)
    with raising_on_signals(), reported():
        entries: list[BatchEntry] = []
        progress: BatchProgress | None = None
        try:
            flags = SandboxFlags(limit, {"memory": memory, "timeout": timeout}, packages=package)
            entries = [
                replace(entry, job=apply_overrides(
                    entry.job, model=model, max_turns=max_turns, backend=sandbox,
                    limits=flags.limits(entry.job.sandbox.limits),
                    environment=flags.environment(entry.job.sandbox.environment) if package else None,
                ))  # fmt: skip
                for entry in batch_entries(jobs, job_file)
            ]
            # the runner (the Agents SDK among its imports) only once the flags and jobs are known good
            from ..batch.runner import JobRunner, check_models, here, plan_batch, run_batch

            plan = plan_batch(entries, out, resume=resume)
            if ray is None:
                for spec in {entry.job.sandbox.backend: entry.job.sandbox for entry in plan.to_run}.values():
                    prepare_backend(spec, lambda line: console.print(Text.assemble((f"{spec.backend}:", "dim"), " ", safe(line))))
            else:  # each node prepares its own backend
                from ..batch import cluster
                from ..cluster.connect import connect

                connect(ray)
                cluster.check_fits(plan.to_run)
            progress = BatchProgress(console, total=len(entries), earlier=plan.earlier)

            async def whole_batch() -> list[JobOutcome]:
                await check_models(plan.to_run, environ)  # a bad model spec: exit 2, nothing written yet
                run: JobRunner = (
                    here(environ, model_concurrency) if ray is None else cluster.RayJobs(environ, out, model_concurrency)
                )
                return await run_batch(plan, out, parallel=parallel, run=run, watcher=progress)

            with progress.status:
                outcomes = asyncio.run(run_interruptible(whole_batch()))
        except Interrupted as exc:
            if progress is not None:
                out_console.print(summary_table(entries, progress.outcomes, out))
            console.print(Text.assemble((exc.message, "red"), "; the running jobs were saved and closed: ", safe(out)))
            exit_now(exc.exit_code)
    out_console.print(summary_table(entries, outcomes, out))
    for line in failure_lines(outcomes):
        console.print(line)
    raise typer.Exit(0 if all(outcome.ok for outcome in outcomes) else 1)
