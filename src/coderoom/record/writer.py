"""`Recorder` appends each event of a run to `run.jsonl` (flushed, so a killed run keeps what
happened) and passes it to listeners such as the CLI's progress display."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .events import RECORD_FILE, Event, Listener

MAX_TOOL_OUTPUT_CHARS = 20_000


def bounded(text: str, limit: int = MAX_TOOL_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters not recorded ...]"


class Recorder:
    """Appends events to run.jsonl and fans them out to listeners."""

    def __init__(self, run_dir: Path, listeners: list[Listener] | None = None) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / RECORD_FILE
        self._file = self.path.open("a", encoding="utf-8")
        self._listeners = list(listeners or [])
        self._start = time.monotonic()

    def emit(self, event_type: str, **fields: Any) -> Event:
        event = {"type": event_type, "t": round(time.monotonic() - self._start, 4), **fields}
        self._file.write(json.dumps(event, default=str, ensure_ascii=False) + "\n")
        self._file.flush()
        for listener in self._listeners:
            listener(event)
        return event

    def close(self) -> None:
        self._file.close()
