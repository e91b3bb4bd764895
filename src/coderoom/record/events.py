"""What a run record holds: one JSON object per line in `run.jsonl`, each with a `type`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

RECORD_FILE = "run.jsonl"

Event = dict[str, Any]
Listener = Callable[[Event], None]
