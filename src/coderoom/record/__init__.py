"""The run record: every model call and tool call of a run, as JSON lines beside the outputs.

`events` says what a record holds, `writer` appends it, `reader` reads it back (for `show`,
`export`, `rerun`), `hooks` (which needs the Agents SDK) turns a run's lifecycle into events.
"""

from .events import RECORD_FILE, Event, Listener
from .reader import read_record
from .writer import Recorder, bounded

__all__ = ["RECORD_FILE", "Event", "Listener", "Recorder", "bounded", "read_record"]
