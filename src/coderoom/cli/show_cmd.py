"""`coderoom show RUN_DIR`: a readable transcript of a run, from its record.

The record is hostile (it holds what the sandbox printed and what the model said), so every piece
of it is shown through `display`: escaped, never markup. A run that did not finish (killed, or
still running) is shown as far as it got and marked "did not finish" at the end; `show` still
exits 0, as it does for a failed run: it did its job, and the run's state is in what it prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .application import app
from .errors import reported


@app.command()
def show(run_dir: Annotated[Path, typer.Argument(help="a run folder (holds run.jsonl)")]) -> None:
    """Print a readable transcript of a run."""
    from ..record import read_record
    from .transcript import print_record

    with reported():
        record = read_record(run_dir)
    print_record(record)
