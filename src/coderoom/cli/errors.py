"""The CLI's one way to report an error: `coderoom: error: MESSAGE` on stderr, and its exit code.

Messages are printed verbatim (no rich markup, no wrapping of paths) and terminal-safe: a
message may quote a name a sandbox chose. typer is imported only to raise its Exit: the fast
path of `sandbox run` (`sandbox_run`) reports through `show` without it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from ..errors import CoderoomError
from ..hostile.text import terminal_safe


def show(message: str, exit_code: int) -> int:
    """Print `message` as an error; return `exit_code` for the caller to exit with."""
    sys.stderr.write(f"coderoom: error: {terminal_safe(message)}\n")
    sys.stderr.flush()
    return exit_code


def fail(message: str, exit_code: int) -> NoReturn:
    import typer

    raise typer.Exit(show(message, exit_code))


@contextmanager
def reported() -> Iterator[None]:
    """Turn any `CoderoomError` raised inside into its message and exit code."""
    try:
        yield
    except CoderoomError as exc:
        fail(exc.message, exc.exit_code)
