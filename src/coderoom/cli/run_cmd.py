"""`coderoom run`: run a job with live progress, then its artifacts and final message.

Everything shown that a model or a sandbox chose goes through `display` (terminal-safe, no markup).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..errors import JobError, RecordError
from ..sandboxes import backend_names
from ..sandboxes.registry import prepare_backend
from ..sandboxes.stops import how_to_raise
from ..sandboxes.flags import SandboxFlags
from ..sandboxes.requirements import PACKAGE_HELP
from .application import app
from .display import safe, safe_markdown, shown
from .errors import reported
from .job_overrides import apply_overrides
from .limit_option import Limit
from . import service_options as options

if TYPE_CHECKING:  # pydantic (jobs) and rich.markdown load when a command needs them
    from ..jobs import Job

console = Console(stderr=True)
out = Console()


def _job_from_flags(
    target: Optional[str],
    prompt: Optional[str],
    inputs: list[str],
    outputs: list[str],
) -> Job:
    from ..job_target import check_job_target
    from ..jobs import JOB_FILE, build_job, load_job, parse_input_flag, with_output_flags

    path = Path(target) if target else None
    if path is not None and (path.is_dir() or (path.suffix == ".toml" and path.exists())):
        job = load_job(path)
        if prompt:
            job = job.model_copy(update={"prompt": prompt})
        if inputs or outputs:
            data = job.model_dump()
            data["inputs"].update(dict(parse_input_flag(f) for f in inputs))
            data["outputs"] = with_output_flags(data["outputs"], outputs)
            job = build_job(data)
        return job
    if target:
        check_job_target(target)
    request = prompt or target
    if not request:
        raise JobError(f"give a job folder (with {JOB_FILE}) or a prompt")
    return build_job(
        {
            "name": "run",
            "prompt": request,
            "inputs": dict(parse_input_flag(f) for f in inputs),
            "outputs": outputs,
        }
    )


@app.command()
def run(
    target: Annotated[Optional[str], typer.Argument(help="a job folder (coderoom.toml) or the prompt")] = None,
    prompt: Annotated[Optional[str], typer.Option("--prompt", "-p", help="the request (overrides the job's)")] = None,
    inputs: Annotated[list[str], typer.Option("--input", "-i", help="HOST=WORKSPACE, e.g. data/x.csv=input/x.csv")] = [],
    outputs: Annotated[list[str], typer.Option("--output", "-o", help="a required output, e.g. output/report.md; PATH:allow-empty when an empty result is fine")] = [],
    model: Annotated[Optional[str], typer.Option(help="OpenAI model name, openai-compatible:MODEL@URL, or offline")] = None,
    max_turns: Annotated[Optional[int], typer.Option(help="model turns allowed (default 25)")] = None,
    tool_choice: Annotated[Optional[str], typer.Option(help="auto | required | none | a tool name")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="output tokens per model reply")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="sampling temperature, 0-2")] = None,
    sandbox: Annotated[Optional[str], typer.Option(help=f"sandbox backend: {' | '.join(backend_names())}")] = None,
    memory: Annotated[Optional[str], typer.Option(help="sandbox memory, e.g. 2G")] = None,
    timeout: Annotated[Optional[float], typer.Option(help="seconds per command")] = None,
    network: Annotated[Optional[bool], typer.Option("--network/--no-network", help="allow network in the sandbox")] = None,
    limit: Limit = [],
    package: Annotated[list[str], typer.Option("--package", help=PACKAGE_HELP)] = [],
    allow_host: options.AllowHost = [],
    resolve: options.Resolve = [],
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="where to save outputs and the record")] = None,
) -> None:
    """Run a job: the agent writes and runs code in a sandbox; validated artifacts come back.

    SIGINT, SIGTERM and SIGHUP stop it the same way (see `coderoom.interrupts`): the workspace
    is saved, the sandbox closed, the record ends "interrupted"; exit 130 / 143 / 129.
    """
    import asyncio

    from ..interrupts import Interrupted, exit_now, raising_on_signals, run_interruptible

    run_dir: Path | None = None
    with raising_on_signals(), reported():
        try:
            job = _job_from_flags(target, prompt, inputs, outputs)
            flags = SandboxFlags(limit, {"memory": memory, "timeout": timeout, "network": network}, allow_host, resolve, package)
            limits = flags.limits(job.sandbox.limits)
            environment = flags.environment(job.sandbox.environment) if package else None
            job = apply_overrides(
                job, model=model, max_turns=max_turns, tool_choice=tool_choice, max_tokens=max_tokens,
                temperature=temperature, backend=sandbox, limits=limits, environment=environment,
            )
            prepare_backend(
                job.sandbox, lambda line: console.print(Text.assemble((f"{job.sandbox.backend}:", "dim"), " ", safe(line)))
            )
            # the run's own modules (the Agents SDK among them) only once the job and flags are known good
            from ..models import resolve_model
            from ..run import new_run_dir, run_job
            from .progress import Progress

            resolved = resolve_model(job.model or None, environ=dict(os.environ))  # exit 2, no run folder yet
            run_dir = out_dir or new_run_dir(job)
            progress = Progress(console)
            with progress.status:
                run = run_job(job, run_dir=run_dir, listeners=[progress], environ=dict(os.environ), model=resolved)
                result = asyncio.run(run_interruptible(run))
        except Interrupted as exc:
            partial = ("; the sandbox was closed. Partial record: ", safe(run_dir)) if run_dir else ()
            console.print(Text.assemble((exc.message, "red"), *partial))
            exit_now(exc.exit_code)
    _print_summary(result.checks, result.final_output, run_dir)
    _print_notes(run_dir)
    for hit in result.limits_hit:
        console.print(Text.assemble(("sandbox limit: ", "yellow"), safe(how_to_raise(hit))))
    if result.error:
        console.print(Text.assemble((f"{result.status}:", "red"), " ", safe(result.error)))
    raise typer.Exit(0 if result.ok else 1)


def _print_notes(run_dir: Path) -> None:
    """How the run went, where its outputs do not show it (from the record; `show` prints the
    same lines)."""
    from ..record import read_record
    from ..record.notes import run_notes

    try:
        events = read_record(run_dir).events
    except RecordError:
        return
    for note in run_notes(events):
        console.print(Text.assemble(("note: ", "yellow"), safe(note)))


def _print_summary(checks: list[Any], final_output: str, run_dir: Path) -> None:
    """The artifact table and the final message: names, details and text all shown escaped."""
    table = Table(title=safe(f"artifacts in {run_dir}"), title_justify="left")
    table.add_column("path")
    table.add_column("size", justify="right")
    table.add_column("check")
    for check in checks:
        size = "-" if check.size is None else f"{check.size:,}"
        mark = ("ok", "green") if check.ok else ("FAIL", "red")
        table.add_row(safe(check.path), size, Text.assemble(mark, " ", safe(check.detail)))
    if checks:
        out.print(table)
    if final_output:
        out.print(Panel(safe_markdown(shown(final_output)), title="final message", title_align="left"))
