"""The replay's own error, as one line for the user: a failed rerun said only "FAIL missing"
while the cause (`KeyError: 'timestamp'`, the new file's columns) sat in replay.log.

The log is written in the sandbox by code from a record, so it is hostile: only its first
MAX_SCANNED bytes of stderr are read, the line is cut to MAX_LINE characters, and it is made
terminal-safe before anyone prints it. An error the original run also had (the agent saw it and
went on; the replay repeats it) is not the cause: the first new one is.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..hostile.text import terminal_safe

MAX_SCANNED = 1024**2
MAX_LINE = 300
TRACEBACK = "Traceback (most recent call last):"


def replay_error(stderr: bytes, recorded: Iterable[str] = ()) -> str | None:
    """The first exception a replayed cell raised that is not among the `recorded` errors of
    the original run's cells (later cells often fail only because of it: a NameError for what
    it did not define), with how many more there were; else the last line of stderr; None
    when stderr is empty."""
    lines = stderr[:MAX_SCANNED].decode("utf-8", "replace").splitlines()
    known = {_words(last) for error in recorded if (last := last_line(error)) is not None}
    errors = [_exception_line(lines, index) for index, line in enumerate(lines) if line.startswith(TRACEBACK)]
    found = [error for error in errors if error and _words(error) not in known]
    if found:
        more = f" (and {len(found) - 1} later errors)" if len(found) > 1 else ""
        return _shown(found[0]) + more
    if errors:
        return None  # only the errors the original run had too
    last = last_line(stderr[-MAX_SCANNED:].decode("utf-8", "replace"))
    return _shown(last) if last is not None else None


def last_line(text: str) -> str | None:
    """The last non-blank line: a traceback's exception."""
    return next((line for line in reversed(text[-MAX_SCANNED:].splitlines()) if line.strip()), None)


def _exception_line(lines: list[str], start: int) -> str | None:
    """The line that ends the traceback starting at `start`: the first one not indented."""
    for line in lines[start + 1 :]:
        if line and not line[0].isspace():
            return line
    return None


def _words(line: str) -> str:
    return " ".join(line.split())


def _shown(line: str) -> str:
    line = _words(line)
    return terminal_safe(line if len(line) <= MAX_LINE else line[: MAX_LINE - 1] + "…")
