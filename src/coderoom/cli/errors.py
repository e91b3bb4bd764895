"""The CLI's one way to report an error: `coderoom: error: MESSAGE` on stderr, and its exit code.

Messages are printed verbatim (no rich markup, no wrapping of paths) and terminal-safe: a
message may quote a name a sandbox chose.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer

from ..errors import CoderoomError
from ..hostile.text import terminal_safe


def fail(message: str, exit_code: int) -> NoReturn:
    sys.stderr.write(f"coderoom: error: {terminal_safe(message)}\n")
    sys.stderr.flush()
    raise typer.Exit(exit_code)


@contextmanager
def reported() -> Iterator[None]:
    """Turn any `CoderoomError` raised inside into its message and exit code."""
    try:
        yield
    except CoderoomError as exc:
        fail(exc.message, exc.exit_code)
