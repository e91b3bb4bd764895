"""`Recorder` appends each event of a run to `run.jsonl` (flushed, so a killed run keeps what
happened) and passes it to listeners such as the CLI's progress display.

Every event is validated against its model before it is written, and written as ASCII JSON: the
sandbox's text can hold any character, and a raw U+2028, U+0085 or \\r in a line would let a
line-splitting reader cut the record there. Escaped, each event is exactly one `\\n`-ended line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .events import (
    EVENT_TYPES, LIVE_ONLY, MAX_COMMAND_CHARS, MAX_SESSION_ID, MAX_SHELL_NAME_CHARS, MAX_SHELL_OUTPUT_CHARS, RECORD_FILE, Event,
    Listener, ShellResult, ShellStatus,
)

MAX_TOOL_OUTPUT_CHARS = 20_000


def bounded(text: str, limit: int = MAX_TOOL_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not recorded ...]"


def shell_result(
    status: ShellStatus,
    output: str,
    *,
    command: str | None = None,
    workdir: str | None = None,
    shell: str | None = None,
    session_id: int | None = None,
    **fields: Any,
) -> ShellResult:
    """A shell call's result as the record keeps it, made here for every surface (the agent's
    shell tools, a session's `exec`): the output's first MAX_SHELL_OUTPUT_CHARS characters and
    its whole length; a command, folder, shell or session id beyond the record's bounds (the
    model chose them) not kept, so writing the record never fails on them."""
    return ShellResult(
        status=status,
        output=output[:MAX_SHELL_OUTPUT_CHARS],
        output_chars=len(output),
        command=command if command is not None and len(command) <= MAX_COMMAND_CHARS else None,
        workdir=workdir if workdir is not None and len(workdir) <= MAX_SHELL_NAME_CHARS else None,
        shell=shell if shell is not None and len(shell) <= MAX_SHELL_NAME_CHARS else None,
        session_id=session_id if session_id is not None and 0 <= session_id <= MAX_SESSION_ID else None,
        **fields,
    )


def encode(event: Event) -> str:
    """One record line: `type` first, JSON with every non-ASCII character escaped, and `\\n`."""
    data = event.model_dump(mode="json")
    return json.dumps({"type": data.pop("type"), **data}, ensure_ascii=True) + "\n"


class Recorder:
    """Appends events to run.jsonl and fans them out to listeners."""

    def __init__(self, run_dir: Path, listeners: list[Listener] | None = None) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / RECORD_FILE
        self._file = self.path.open("a", encoding="ascii")
        self._listeners = list(listeners or [])
        self._start = time.monotonic()

    def emit(self, event_type: str, **fields: Any) -> Event:
        """Validate, write and announce one event; a field its model lacks is a bug, refused.
        A LIVE_ONLY event (a reply's progress) is announced and not written."""
        model = EVENT_TYPES[event_type]
        unknown = set(fields) - set(model.model_fields)
        if unknown:
            raise TypeError(f"{event_type} events have no field {', '.join(sorted(unknown))}")
        event: Event = model.model_validate({"t": round(time.monotonic() - self._start, 4), **fields})  # type: ignore[assignment]
        if event_type not in LIVE_ONLY:
            self._file.write(encode(event))
            self._file.flush()
        for listener in self._listeners:
            listener(event)
        return event

    def close(self) -> None:
        self._file.close()
