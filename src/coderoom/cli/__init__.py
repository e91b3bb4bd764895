"""The `coderoom` command. Each group of commands lives in its own module; a sandbox backend's
own commands (Docker's `image build`) come from the backend itself.

`main` is the entry point: a plain `sandbox run` runs without typer, rich or pydantic
(`sandbox_run`); everything else goes to `app`, the typer application with every command
registered, loaded on first use (`from coderoom.cli import app` gets it too).

Nothing here imports the Agents SDK: `--help`, `show`, `export` and usage errors stay fast.
Commands import what they run when they run.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import sys
from typing import Any


def main() -> None:
    """`coderoom ...`: the fast path when it applies, else the typer app.

    The fast path ends without interpreter finalization (tearing down asyncio and every module
    took longer than the sandbox's own close): its sandbox is closed and removed by then, and
    exit handlers and the streams are run and flushed first.
    """
    try:
        from .sandbox_run import fast_exit_code

        code = fast_exit_code(sys.argv[1:])
    except KeyboardInterrupt:  # before the fast path has its own handlers: nothing made yet
        from .errors import show

        code = show("interrupted by SIGINT", 128 + signal.SIGINT)
    if code is None:
        _typer_app()()
        return
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@functools.cache
def _typer_app() -> Any:
    """The typer app with every command group registered (once: the result is cached)."""
    from ..sandboxes import backend_names, get_backend
    from .rich_help import load_rich_utils

    load_rich_utils()  # before typer could import it with all it imports (see rich_help)
    from . import batch_cmd, export_cmd, mcp_cmd, models_cmd, run_cmd, sandbox_cmd, serve_cmd, show_cmd  # noqa: F401  (commands register on import)
    from .application import app as typer_app

    for name in backend_names():
        commands = get_backend(name).commands()
        if commands is not None:
            typer_app.add_typer(commands)
    globals()["app"] = typer_app
    return typer_app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _typer_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
