"""Reading a run record back, for `show`, `export` and `rerun`. The file is hostile: it may come
from anywhere, so it is read in bounded lines split only on `\\n` (never `str.splitlines`, which
also splits on characters a sandbox can print), and every event is parsed into its model.

A malformed or oversized line is a `RecordError` naming the line. A last line without its `\\n`
(the run was killed while writing it) and a record without `run_end` are not errors: the record
says it is not `finished`, `show` marks it and the exporters refuse it.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import RecordError
from .events import EVENT_TYPES, RECORD_FILE, RECORD_VERSION, Event, RunEnd, RunStart
from . import legacy

MAX_LINE_BYTES = 16 * 1024 * 1024  # a 4 MiB cell of escaped non-ASCII code fits
MAX_RECORD_BYTES = 512 * 1024 * 1024
MAX_EVENTS = 200_000


@dataclass
class Record:
    """The events of one run, and how far the record got."""

    path: Path
    events: list[Event] = field(default_factory=list)
    version: int = RECORD_VERSION
    skipped: int = 0  # events of types this coderoom does not know
    cut: str | None = None  # why the record stops early, if it does

    @property
    def start(self) -> RunStart | None:
        first = self.events[0] if self.events else None
        return first if isinstance(first, RunStart) else None

    @property
    def end(self) -> RunEnd | None:
        return next((e for e in reversed(self.events) if isinstance(e, RunEnd)), None)

    @property
    def unfinished(self) -> str | None:
        """Why this is not the record of a finished run, or None when it is."""
        if self.cut:
            return self.cut
        if self.end is None:
            return "the record has no run_end event: the run was killed or is still running"
        return None

    def require_finished(self) -> RunStart:
        """The run_start of a finished run; a `RecordError` saying why otherwise."""
        if self.start is None:
            raise RecordError(f"{self.path} has no run_start event; is this a coderoom run directory?")
        if self.unfinished:
            raise RecordError(f"{self.path}: the run did not finish ({self.unfinished}); only a finished run can be exported or rerun")
        return self.start


def read_record(run_dir: Path, *, head_bytes: int | None = None) -> Record:
    """The record of the run in `run_dir`; with `head_bytes`, only the lines within its first
    `head_bytes` bytes (a page view), `cut` then saying so."""
    path = run_dir / RECORD_FILE
    try:  # a forged run folder may hold a FIFO, a device or a link here: never block, never follow
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise RecordError(f"{run_dir}: no {RECORD_FILE} here; give a run directory (runs/NAME-TIME)") from None
    except OSError as exc:
        raise RecordError(f"{path}: cannot be read as a record ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RecordError(f"{path}: not a regular file; not a coderoom record")
    os.set_blocking(fd, True)
    handle = os.fdopen(fd, "rb")
    record = Record(path)
    with handle:
        number = 0
        read = 0
        while True:
            left = MAX_LINE_BYTES if head_bytes is None else min(MAX_LINE_BYTES, head_bytes - read)
            line = handle.readline(left + 1)
            if not line:
                break
            if head_bytes is not None and read + len(line) > head_bytes:
                record.cut = f"only the record's first {head_bytes:,} bytes were read"
                break
            number += 1
            read += len(line)
            if len(line) > MAX_LINE_BYTES:
                raise RecordError(f"{path} line {number} is over {MAX_LINE_BYTES} bytes (MAX_LINE_BYTES); not a coderoom record")
            if read > MAX_RECORD_BYTES or number > MAX_EVENTS:
                raise RecordError(f"{path} is over {MAX_RECORD_BYTES} bytes or {MAX_EVENTS} events; not a coderoom record")
            if not line.endswith(b"\n"):
                record.cut = f"line {number} is cut short: the run was killed while writing it"
                break
            _add(record, _parse(path, number, line), number)
    return record


def _parse(path: Path, number: int, line: bytes) -> dict[str, Any]:
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        raise RecordError(f"{path} line {number} is not valid JSON") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise RecordError(f"{path} line {number} is not an event (a JSON object with a type)")
    return raw


def _add(record: Record, raw: dict[str, Any], number: int) -> None:
    kind = raw["type"]
    if number == 1:
        if kind != "run_start":
            raise RecordError(f"{record.path} line 1 is a {kind[:40]!r} event, not run_start")
        version = raw.get("record_version", 1)
        if not isinstance(version, int) or not 1 <= version <= RECORD_VERSION:
            raise RecordError(
                f"{record.path} has record version {str(version)[:20]}; this coderoom reads versions 1 to {RECORD_VERSION}"
            )
        record.version = version
    model = EVENT_TYPES.get(kind)
    if model is None:
        record.skipped += 1
        return
    raw = legacy.upgrade(raw, record.version)
    try:
        record.events.append(model.model_validate(raw))  # type: ignore[arg-type]
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise RecordError(f"{record.path} line {number}: {kind} event: {where}: {problem['msg']}") from None
