"""`coderoom sandbox ...`: use a sandbox directly, without an agent.

`sandbox run` is built from `sandbox_run.OPTIONS`, which its fast path parses too; both run
`sandbox_run.execute`.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import typer

from ..errors import EXIT_FAILED
from ..sandboxes import backend_names, get_backend
from .application import app
from .errors import reported, show
from .sandbox_run import COMMAND_HELP, OPTIONS, SUMMARY, execute, flags_of

if TYPE_CHECKING:
    from ..sandboxes.spec import SandboxSpec

sandbox_app = typer.Typer(help="Run commands in a sandbox and manage sandbox resources.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


def run(command: list[str], **values: Any) -> None:
    with reported():
        spec = _spec(values)
        code = execute(spec, command, values["workspace"], copy_back_all=values["copy_back_all"], progress=_progress)
    raise typer.Exit(code)


def _signature() -> tuple[inspect.Signature, dict[str, Any]]:
    """`run`'s parameters as typer reads them, made from `sandbox_run.OPTIONS` (the fast path
    parses the same table)."""
    parameters = [inspect.Parameter("command", inspect.Parameter.KEYWORD_ONLY,
                                    default=typer.Argument(..., help=COMMAND_HELP), annotation=list[str])]  # fmt: skip
    annotations: dict[str, Any] = {"command": list[str], "return": None}
    for option in OPTIONS:
        default = option.value("default")
        kind = list[str] if option.kind is list else option.kind if default is not None else option.kind | None
        info = typer.Option(default, help=option.value("help"), **option.typer_extra)
        parameters.append(inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=kind))
        annotations[option.name] = kind
    return inspect.Signature(parameters), annotations


run.__signature__, run.__annotations__ = _signature()  # type: ignore[attr-defined]
run.__doc__ = SUMMARY
sandbox_app.command("run")(run)


def _spec(values: dict[str, Any]) -> SandboxSpec:
    from ..sandboxes import SandboxSpec
    flags = flags_of(values)
    spec = SandboxSpec(backend=values["sandbox"], limits=flags.limits(), environment=flags.environment())
    get_backend(spec.backend)  # an unknown or unconfined backend is a usage error
    return spec


def _progress(line: str) -> None:
    typer.echo(f"coderoom: {line}", err=True)


@sandbox_app.command("info")
def info() -> None:
    """Say which enforcement of the limits is in force on this machine, for every backend."""
    from ..sandboxes import SandboxSpec

    with reported():
        for name in backend_names():
            backend = get_backend(name)
            reason = backend.unavailable_reason(SandboxSpec(backend=name))
            typer.echo(f"{name}:")
            for line in ([f"unavailable: {reason}"] if reason else backend.info().splitlines()):
                typer.echo(f"  {line}")


@sandbox_app.command("prune")
def prune() -> None:
    """Remove the sandbox resources crashed sessions left behind, for every backend that runs here.

    A live session's workspace whose owner died is first saved into its run folder (recovered);
    one that cannot be saved is named with why, then removed. Before that, the folders of dead
    Ray session actors and batch jobs on this node go (`cluster.node_folders`: nobody collects
    what would be saved there). Exits 1 when something had to be left (each named on stderr), after pruning
    all the rest."""
    import asyncio

    from ..cluster import node_folders
    from ..recovery import recover
    from ..sandboxes import SandboxSpec

    skipped: list[str] = []
    with reported():
        removed = node_folders.prune(skipped)
        typer.echo(f"removed {removed} dead Ray worker folder{'' if removed == 1 else 's'} (session actors', batch jobs')")
        for outcome in asyncio.run(recover(SandboxSpec(), remove_unsaved=True)):
            typer.echo(outcome.describe())
        for name in backend_names():
            backend = get_backend(name)
            if backend.unavailable_reason(SandboxSpec(backend=name)) is not None:
                continue
            removed = backend.prune(skipped)
            typer.echo(f"removed {removed} {backend.leftovers}{'' if removed == 1 else 's'} ({name})")
        if skipped:
            for line in skipped:
                show(f"skipped {line}", EXIT_FAILED)
            raise typer.Exit(EXIT_FAILED)
