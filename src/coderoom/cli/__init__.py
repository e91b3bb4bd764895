"""The `coderoom` command. Each group of commands lives in its own module; a sandbox backend's
own commands (Docker's `image build`) come from the backend itself.

Nothing here imports the Agents SDK: `--help`, `show`, `export` and usage errors stay fast.
Commands import what they run when they run.
"""

from __future__ import annotations

from .app import app


def _register() -> None:
    from ..sandboxes import backend_names, get_backend
    from . import export_cmd, mcp_cmd, models_cmd, run_cmd, sandbox_cmd, serve_cmd, show_cmd  # noqa: F401  (commands register on import)

    for name in backend_names():
        commands = get_backend(name).commands()
        if commands is not None:
            app.add_typer(commands)


_register()
