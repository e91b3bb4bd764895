"""The run record: every model call and tool call of a run, as JSON lines beside the outputs.

`events` says what a record holds (typed, versioned events), `writer` appends it, `reader` reads
it back (for `show`, `export`, `rerun`) with `legacy` upgrading version 1 records, `hooks` (which
needs the Agents SDK) turns a run's lifecycle into events.
"""

from .events import RECORD_FILE, RECORD_VERSION, Event, Listener
from .reader import Record, read_record
from .writer import Recorder, bounded

__all__ = ["RECORD_FILE", "RECORD_VERSION", "Event", "Listener", "Record", "Recorder", "bounded", "read_record"]
