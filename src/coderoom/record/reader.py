"""Reading a run record back, for `show`, `export` and `rerun`. The file is hostile: it may come
from anywhere."""

from __future__ import annotations

import json
from pathlib import Path

from .events import RECORD_FILE, Event


def read_record(run_dir: Path) -> list[Event]:
    """All events of a run; a truncated last line (a killed run) is ignored."""
    events = []
    for line in (run_dir / RECORD_FILE).read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return events
