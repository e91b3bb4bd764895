"""`coderoom sandbox ...`: use a sandbox directly, without an agent."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

import typer

from ..errors import UsageError
from ..hostile.planted import HOOK_REASON
from ..hostile.text import terminal_safe, terminal_safe_bytes
from ..sandboxes import backend_names, default_backend_name, get_backend
from .app import app
from .errors import reported

if TYPE_CHECKING:
    from ..sandboxes.spec import SandboxSpec

sandbox_app = typer.Typer(help="Run commands in a sandbox and manage sandbox resources.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("run")
def run(
    command: list[str] = typer.Argument(..., help="the command and its arguments (after --)"),
    sandbox: str = typer.Option(default_backend_name(), help=f"backend: {' | '.join(backend_names())}"),
    workspace: Path | None = typer.Option(
        None, file_okay=False, exists=True, help="copy DIR in, and the workspace back out"
    ),
    copy_back_all: bool = typer.Option(
        False, help="also copy back VCS, shell and editor hook files (.git/, .envrc, ...): they can run code on this host"
    ),
    network: bool = typer.Option(False, help="allow network access"),
    memory: str | None = typer.Option(None, help="memory limit, e.g. 512M"),
    timeout: float | None = typer.Option(None, help="wall-clock seconds"),
    pids: int | None = typer.Option(None, help="processes and threads"),
) -> None:
    """Run one command in a fresh sandbox; exit with its status (124 timeout, 137 killed)."""
    with reported():
        spec = _spec(sandbox, network=network, memory=memory, timeout=timeout, pids=pids)
        get_backend(spec.backend).prepare(spec, lambda line: typer.echo(f"coderoom: {line}", err=True))
        import asyncio

        from ..sandboxes.oneshot import run_once

        result = asyncio.run(run_once(spec, command, workspace, copy_back_all=copy_back_all))
    _write(sys.stdout.buffer, result.stdout)
    _write(sys.stderr.buffer, result.stderr)
    if result.copied_out is not None:
        for name, reason in result.copied_out.refused:
            sys.stderr.write(terminal_safe(f"coderoom: not copied out: {name!r}: {reason}") + "\n")
        if any(reason == HOOK_REASON for _, reason in result.copied_out.refused):
            sys.stderr.write("coderoom: --copy-back-all copies hook files too\n")
    raise typer.Exit(result.exit_code)


def _spec(backend: str, *, network: bool, memory: str | None, timeout: float | None, pids: int | None) -> SandboxSpec:
    from ..sandboxes import Limits, SandboxSpec, parse_size

    overrides: dict[str, object] = {"network": network}
    try:
        if memory is not None:
            overrides["memory"] = parse_size(memory)
        if timeout is not None:
            overrides["timeout"] = timeout
        if pids is not None:
            overrides["pids"] = pids
        spec = SandboxSpec(backend=backend, limits=Limits(**overrides))
    except ValueError as exc:
        raise UsageError(f"bad sandbox limit: {exc}") from None
    get_backend(spec.backend)  # an unknown or unconfined backend is a usage error
    return spec


def _write(stream: IO[bytes], data: bytes) -> None:
    """Sandbox output is hostile: on a terminal, escape control sequences (catalogue RES-14)."""
    if stream.isatty():
        data = terminal_safe_bytes(data)
    stream.write(data)
    stream.flush()


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
    """Remove the sandbox resources crashed sessions left behind, for every backend that runs here."""
    from ..sandboxes import SandboxSpec

    with reported():
        for name in backend_names():
            backend = get_backend(name)
            if backend.unavailable_reason(SandboxSpec(backend=name)) is not None:
                continue
            removed = backend.prune()
            typer.echo(f"removed {removed} {backend.leftovers}{'' if removed == 1 else 's'} ({name})")
