"""`coderoom mcp --print-config`: the `mcpServers` entry an MCP client needs, ready to paste.

Why absolute paths: a desktop client (Claude Desktop, Cursor, ...) starts the server with its
own PATH and working directory, so `"command": "coderoom"` from a virtual environment is not
found, and a relative `--allow-read` or `--runs` would name some other folder. The command is
the `coderoom` script installed beside this interpreter (a venv's bin/), else the one on PATH,
else this interpreter with `-m coderoom`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SERVER_NAME = "coderoom"


def installed_command() -> list[str]:
    """The absolute command line that starts coderoom from any PATH and working directory."""
    beside = Path(sys.executable).absolute().parent / "coderoom"  # not resolved: a venv's python is a link
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    on_path = shutil.which("coderoom")
    if on_path:
        return [str(Path(on_path).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "coderoom"]


def server_args(*, allow_read: Sequence[Path], runs: Path, model: str | None, sandbox: str | None,
                memory: str | None, timeout: float | None, limits: Sequence[str],
                allow_hosts: Sequence[str] = (), resolves: Sequence[str] = (), packages: Sequence[str] = (),
                ray: str | None = None) -> list[str]:
    """`mcp` and the options given with --print-config, host paths made absolute."""
    args = ["mcp"]
    for folder in allow_read:
        args += ["--allow-read", str(folder.expanduser().absolute())]
    args += ["--runs", str(runs.expanduser().absolute())]
    args += ["--model", model] if model else []
    args += ["--sandbox", sandbox] if sandbox else []
    args += ["--memory", memory] if memory else []
    args += ["--timeout", f"{timeout:g}"] if timeout is not None else []
    for limit in limits:
        args += ["--limit", limit]
    for host in allow_hosts:
        args += ["--allow-host", host]
    for item in resolves:
        args += ["--resolve", item]
    for package in packages:
        args += ["--package", package]
    args += ["--ray", ray] if ray else []
    return args


def client_config(args: Sequence[str]) -> dict[str, Any]:
    """The stdio client configuration, as in the README's MCP section."""
    command, *prefix = installed_command()
    return {"mcpServers": {SERVER_NAME: {"command": command, "args": [*prefix, *args]}}}


def render(args: Sequence[str]) -> str:
    return json.dumps(client_config(args), indent=2)
