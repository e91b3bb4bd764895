"""The run record: every model call and tool call of a run, as JSON lines beside the outputs.

`events` says what a record holds (typed, versioned events), `writer` appends it, `reader` reads
it back (for `show`, `export`, `rerun`) with `legacy` upgrading older records, `hooks` (which
needs the Agents SDK) turns a run's lifecycle into events. The names below load on first use
(the events are pydantic models): `coderoom --help` needs only RECORD_FILE.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .names import RECORD_FILE

if TYPE_CHECKING:
    from .events import RECORD_VERSION, Event, Listener
    from .reader import Record, read_record
    from .writer import Recorder, bounded

_LAZY = {
    "RECORD_VERSION": ".events",
    "Event": ".events",
    "Listener": ".events",
    "Record": ".reader",
    "read_record": ".reader",
    "Recorder": ".writer",
    "bounded": ".writer",
}
__all__ = ["RECORD_FILE", "RECORD_VERSION", "Event", "Listener", "Record", "read_record", "Recorder", "bounded"]
assert set(__all__) == {"RECORD_FILE", *_LAZY}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
