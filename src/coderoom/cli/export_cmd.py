"""`coderoom export` (a run as a notebook or a model-free script) and `coderoom rerun` (that script
on the same or new inputs in a fresh sandbox)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..export.notebook import export_notebook
from ..export.rerun import DEFAULT_TIMEOUT, LOG_FILE
from ..export.rerun import rerun as rerun_run
from ..export.script import export_script
from ..jobs import JobError, parse_input_flag
from ..record import RECORD_FILE
from ..sandboxes import SandboxUnavailable
from . import app

console = Console(stderr=True)


def _run_dir(path: Path) -> Path:
    if not (path / RECORD_FILE).is_file():
        console.print(f"[red]{path}: no {RECORD_FILE} here; give a run directory (runs/NAME-TIME)[/]")
        raise typer.Exit(2)
    return path


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (holds run.jsonl)")],
    notebook: Annotated[Path | None, typer.Option("--notebook", help="write a Jupyter notebook")] = None,
    script: Annotated[Path | None, typer.Option("--script", help="write a standalone replay script")] = None,
) -> None:
    """Export what the agent did: a notebook with outputs and figures, or a script that redoes it."""
    run_dir = _run_dir(run_dir)
    if notebook is None and script is None:
        console.print("[red]say what to write: --notebook FILE.ipynb and/or --script FILE.py[/]")
        raise typer.Exit(2)
    try:
        if notebook is not None:
            console.print(f"notebook: {export_notebook(run_dir, notebook)}")
        if script is not None:
            console.print(f"script: {export_script(run_dir, script)}")
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None


@app.command()
def rerun(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (holds run.jsonl)")],
    input: Annotated[
        list[str] | None,
        typer.Option("--input", "-i", help="replace an input: NEW.csv=input/data.csv (repeatable)"),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="where the outputs go")] = None,
    sandbox: Annotated[str | None, typer.Option("--sandbox", help="backend (default: the run's)")] = None,
    timeout: Annotated[float, typer.Option(help="seconds for the whole replay")] = DEFAULT_TIMEOUT,
) -> None:
    """Redo a run's analysis without a model, in a fresh sandbox, on the same or new inputs."""
    run_dir = _run_dir(run_dir)
    try:
        inputs = dict(parse_input_flag(flag) for flag in input or [])
        for workspace_path, host_path in inputs.items():
            if not host_path.exists():
                raise JobError(f"--input {host_path}={workspace_path}: {host_path} does not exist")
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        target = out or run_dir.parent / f"{run_dir.name}-rerun-{stamp}"
        result = asyncio.run(
            rerun_run(run_dir, target, inputs=inputs, backend=sandbox, timeout=timeout)
        )
    except (JobError, ValueError, SandboxUnavailable) as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(1) from None
    for check in result.checks:
        mark = "[green]ok[/]" if check.ok else "[red]missing[/]"
        console.print(f"{mark} {check.path}: {check.detail}")
    for note in result.notes:
        console.print(f"[yellow]{note}[/]")
    console.print(f"replay exit code {result.exit_code}; log: {result.out_dir / LOG_FILE}")
    raise typer.Exit(0 if result.ok else 1)
