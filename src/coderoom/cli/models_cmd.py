"""`coderoom models check MODEL_SPEC`: ask a model's server whether a run could use it.

Exit 0 when every required check passes, 1 when one fails, 2 for a spec that cannot be used.
What the server said is shown through `display` (escaped, never markup).
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .application import app
from .display import safe
from .errors import reported

models = typer.Typer(name="models", help="Check the models coderoom can use.", no_args_is_help=True)
app.add_typer(models)
out = Console(highlight=False)


@models.command()
def check(spec: Annotated[str, typer.Argument(help="openai-compatible:MODEL@BASE_URL, an OpenAI name, or offline")]) -> None:
    """Check that a model answers, makes a forced tool call, and say its context size and whether
    it takes images."""
    import asyncio

    from ..models import resolve_model
    from ..models.check import check_model, passed

    environ = dict(os.environ)
    with reported():
        resolved = resolve_model(spec, environ=environ)  # a bad spec: exit 2

    async def run() -> list:
        try:
            return await check_model(resolved, environ)
        finally:
            await resolved.aclose()

    checks = asyncio.run(run())
    table = Table(title=safe(f"models check {resolved.label}"), title_justify="left")
    for column in ("check", "result", "detail"):
        table.add_column(column)
    for c in checks:
        mark = ("info", "dim") if c.ok is None else ("ok", "green") if c.ok else ("FAIL", "red")
        table.add_row(safe(c.name), Text(*mark), safe(c.detail))
    out.print(table)
    raise typer.Exit(0 if passed(checks) else 1)
