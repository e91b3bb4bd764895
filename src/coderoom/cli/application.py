"""The typer application every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="coderoom",
    help="Run code-writing LLM agents in a real sandbox; get validated artifacts back.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
