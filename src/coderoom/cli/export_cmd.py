"""`coderoom export` (a run as a notebook or a model-free script) and `coderoom rerun` (that script
on the same or new inputs in a fresh sandbox)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from ..errors import RecordError, UsageError
from ..export import REPLAY_TIMEOUT
from ..hostile.text import terminal_safe
from ..record import RECORD_FILE
from .application import app
from .errors import reported
from .limit_option import Limit

console = Console(stderr=True)


def _run_dir(path: Path) -> Path:
    if not (path / RECORD_FILE).is_file():
        raise RecordError(f"{path}: no {RECORD_FILE} here; give a run directory (runs/NAME-TIME)")
    return path


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (holds run.jsonl)")],
    notebook: Annotated[Path | None, typer.Option("--notebook", help="write a Jupyter notebook")] = None,
    script: Annotated[Path | None, typer.Option("--script", help="write a standalone replay script")] = None,
) -> None:
    """Export what the agent did: a notebook with outputs and figures, or a script that redoes it."""
    with reported():
        run_dir = _run_dir(run_dir)
        if notebook is None and script is None:
            raise UsageError("say what to write: --notebook FILE.ipynb and/or --script FILE.py")
        if notebook is not None:
            from ..export.notebook import export_notebook

            console.print(f"notebook: {export_notebook(run_dir, notebook)}", markup=False, highlight=False)
        if script is not None:
            from ..export.script import export_script

            console.print(f"script: {export_script(run_dir, script)}", markup=False, highlight=False)


@app.command()
def rerun(
    run_dir: Annotated[Path, typer.Argument(help="a run directory (holds run.jsonl)")],
    input: Annotated[
        list[str] | None,
        typer.Option("--input", "-i", help="replace an input: NEW.csv=input/data.csv (repeatable)"),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="where the outputs go")] = None,
    sandbox: Annotated[
        str | None, typer.Option("--sandbox", help="backend (default: local on Linux; never the run's)")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help=f"seconds for the whole replay (default {REPLAY_TIMEOUT:g})")
    ] = None,
    network: Annotated[bool, typer.Option("--network", help="let the replay use the network")] = False,
    limit: Limit = [],
) -> None:
    """Redo a run's analysis without a model, in a fresh sandbox, on the same or new inputs.

    The run folder is data: the sandbox, its limits and network come from these flags and the
    defaults, and inputs from --input or the run's own workspace.tar, never from run.jsonl."""
    with reported():
        import asyncio

        from ..export.rerun import LOG_FILE, replacement_inputs
        from ..export.rerun import rerun as rerun_run

        run_dir = _run_dir(run_dir)
        inputs = replacement_inputs(run_dir, input or [])
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        target = out or run_dir.parent / f"{run_dir.name}-rerun-{stamp}"

        result = asyncio.run(
            rerun_run(
                run_dir, target, inputs=inputs, backend=sandbox, timeout=timeout, network=network, limits=limit
            )
        )
    for check in result.checks:
        mark = Text("ok", style="green") if check.ok else Text("FAIL", style="red")
        console.print(Text.assemble(mark, f" {check.path}: {terminal_safe(check.detail)}"))
    for note in result.notes:
        console.print(Text(terminal_safe(note), style="yellow"))
    if result.error and not result.ok:
        console.print(Text.assemble(("replay error: ", "red"), result.error))
    console.print(f"replay exit code {result.exit_code}; log: {result.out_dir / LOG_FILE}", markup=False)
    raise typer.Exit(0 if result.ok else 1)
