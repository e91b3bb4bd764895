"""`coderoom sandbox ...`: use a sandbox directly, without an agent."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import IO

import typer

from coderoom.sandboxes import Limits, SandboxSpec, SandboxUnavailable, default_backend_name
from coderoom.sandboxes.limits import parse_size
from coderoom.sandboxes.oneshot import run_once

from . import app

sandbox_app = typer.Typer(help="Run commands in a sandbox and manage sandbox resources.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")

EXIT_SANDBOX_ERROR = 125  # as `docker run`: the sandbox itself failed, not the command
_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")


@sandbox_app.command("run")
def run(
    command: list[str] = typer.Argument(..., help="the command and its arguments (after --)"),
    sandbox: str = typer.Option(default_backend_name(), help="backend: local | docker"),
    workspace: Path | None = typer.Option(
        None, file_okay=False, exists=True, help="copy DIR in, and the workspace back out"
    ),
    network: bool = typer.Option(False, help="allow network access"),
    memory: str | None = typer.Option(None, help="memory limit, e.g. 512M"),
    timeout: float | None = typer.Option(None, help="wall-clock seconds"),
    pids: int | None = typer.Option(None, help="processes and threads"),
) -> None:
    """Run one command in a fresh sandbox; exit with its status (124 timeout, 137 killed)."""
    overrides: dict[str, object] = {"network": network}
    if memory is not None:
        overrides["memory"] = parse_size(memory)
    if timeout is not None:
        overrides["timeout"] = timeout
    if pids is not None:
        overrides["pids"] = pids
    spec = SandboxSpec(backend=sandbox, limits=Limits(**overrides))
    try:
        result = asyncio.run(run_once(spec, command, workspace))
    except SandboxUnavailable as exc:
        typer.echo(f"coderoom: {exc}", err=True)
        raise typer.Exit(EXIT_SANDBOX_ERROR) from None
    _write(sys.stdout.buffer, result.stdout)
    _write(sys.stderr.buffer, result.stderr)
    if result.copied_out is not None:
        for name, reason in result.copied_out.refused:
            typer.echo(f"coderoom: not copied out: {name!r}: {reason}", err=True)
    raise typer.Exit(result.exit_code)


def _write(stream: IO[bytes], data: bytes) -> None:
    """Sandbox output is hostile: on a terminal, escape control sequences (catalogue RES-14)."""
    if stream.isatty():
        data = _CONTROL.sub(lambda m: b"\\x%02x" % m.group()[0], data)
    stream.write(data)
    stream.flush()


@sandbox_app.command("prune")
def prune() -> None:
    """Remove every coderoom Docker sandbox container left behind (by a crash, say)."""
    from coderoom.sandboxes.docker import backend as docker_backend, prune as prune_containers

    reason = docker_backend.unavailable_reason(SandboxSpec(backend="docker"))
    if reason is not None:
        typer.echo(f"coderoom: {reason}", err=True)
        raise typer.Exit(EXIT_SANDBOX_ERROR)
    removed = prune_containers()
    typer.echo(f"removed {removed} sandbox container{'' if removed == 1 else 's'}")
