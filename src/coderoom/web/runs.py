"""Past runs from the runs folder, read-only: which there are, and one run's record.

A run folder is hostile (a sandbox filled its workspace; anyone may have forged its record), so
only plain names directly in the runs folder are taken (no link, no `..`), the list is bounded,
a summary reads at most SUMMARY_BYTES of the record's first and last lines, and a whole record is
read with `record.reader`'s bounds and shown through `view`.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import RecordError
from ..hostile.tree import open_beneath
from ..record import read_record
from ..record.events import RECORD_FILE
from ..record.names import RUN_NAME
from .view import bounded, event_json

MAX_RUNS_LISTED = 500
SUMMARY_BYTES = 256 * 1024
"""Of a record read for the run list: its first line (run_start) and its end (run_end)."""
MAX_EVENTS_SHOWN = 5_000
MAX_SHOWN_RECORD_BYTES = 16 * 1024**2
"""Of a record read for the page (the reader's own bound is 512 MiB): the events in its first
16 MiB are shown, the rest summarised from its last line (`summarise`)."""


class NoSuchRun(LookupError):
    """The name is not a run folder directly in the runs folder."""


def run_folder(runs_dir: Path, name: str) -> Path:
    """`runs_dir/name` when `name` is a plain folder name there (not a link); NoSuchRun otherwise."""
    if not RUN_NAME.match(name):
        raise NoSuchRun(name)
    path = runs_dir / name
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            raise NoSuchRun(name)
    except OSError:
        raise NoSuchRun(name) from None
    return path


def list_runs(runs_dir: Path) -> list[dict[str, Any]]:
    """The newest MAX_RUNS_LISTED run folders, each with what its record says in brief."""
    try:
        entries = [e for e in os.scandir(runs_dir) if RUN_NAME.match(e.name) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime, reverse=True)
    runs = []
    for entry in entries[:MAX_RUNS_LISTED]:
        summary = summarise(Path(entry.path))
        if summary is not None:
            runs.append({"name": entry.name, "mtime": entry.stat(follow_symlinks=False).st_mtime, **summary})
    return runs


def summarise(run_dir: Path) -> dict[str, Any] | None:
    """Model, request and status from the record's first SUMMARY_BYTES and last line; None when
    there is no record. A live session's request is its first ask's (its job's prompt is only a
    placeholder: `Session`'s), when that ask is in the head read."""
    try:
        fd = open_beneath(run_dir, PurePosixPath(RECORD_FILE), os.O_RDONLY)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        head = handle.read(SUMMARY_BYTES)
        size = os.fstat(handle.fileno()).st_size
        handle.seek(max(0, size - SUMMARY_BYTES))
        tail = handle.read(SUMMARY_BYTES)
    lines = head.split(b"\n")
    start = _event(lines[0])
    end = _event(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    job = start.get("job")
    if not isinstance(job, dict):
        job = {}
    request = job.get("prompt", "")
    asks = (_event(line) for line in lines[1:-1] if b'"ask_start"' in line)  # parse only the likely lines
    first_ask = next((e for e in asks if e.get("type") == "ask_start"), None)
    if first_ask is not None:
        request = first_ask.get("request", "")
    status = end.get("status") if end.get("type") == "run_end" else "unfinished"
    return bounded({
        "model": str(start.get("model", "?")),
        "request": str(request)[:300],
        "status": str(status),
    })


def _event(line: bytes) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def run_record(run_dir: Path) -> dict[str, Any]:
    """A run's events for the page (those in its first MAX_SHOWN_RECORD_BYTES, at most
    MAX_EVENTS_SHOWN), or the reason it cannot be read; a record cut short is summarised."""
    try:
        record = read_record(run_dir, head_bytes=MAX_SHOWN_RECORD_BYTES)
    except RecordError as exc:
        return {"events": [], "error": exc.message}
    events = [event_json(e) for e in record.events[:MAX_EVENTS_SHOWN]]
    notes = []
    if len(record.events) > MAX_EVENTS_SHOWN:
        notes.append(f"only the first {MAX_EVENTS_SHOWN} of {len(record.events)} events are shown")
    if record.unfinished:
        notes.append(record.unfinished)
    if record.cut and (summary := summarise(run_dir)) is not None:
        notes.append(f"the rest is not shown; the record ends with status {summary['status']} (coderoom show reads it all)")
    return {"events": events, "notes": notes}
