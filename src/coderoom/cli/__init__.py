"""The `coderoom` command. Each group of commands lives in its own module."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="coderoom",
    help="Run code-writing LLM agents in a real sandbox; get validated artifacts back.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from . import export_cmd, image_cmd, run_cmd, sandbox_cmd  # noqa: F401  (commands register on import)


_register()
