"""Attack on a live session's event stream while replies stream (attackpage, 2026-12-06).

A page that reads slowly falls more than SUBSCRIBER_QUEUE events behind; the oldest are dropped
and one `events_lost` stands for them, moving the SSE numbering (each id is a record line) past
them. Streaming replies put `model_stream` events, which have no record line, into the same
queue: counted among the lost, they pushed every later id past its line, and a browser that
reconnected (Last-Event-ID) skipped that many events of the record. Driven with the real
`Recorder`, `EventHub` and the page's SSE generator (`web.live._stream`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from coderoom.record.events import RECORD_FILE
from coderoom.record.writer import Recorder
from coderoom.service.events import SUBSCRIBER_QUEUE, EventHub
from coderoom.web.live import _stream


@dataclass
class Followed:
    """What `_stream` reads of a session: its record's folder and its live events."""

    run_dir: Path
    hub: EventHub

    def subscribe(self):  # type: ignore[no-untyped-def]
        return self.hub.subscribe()


async def test_a_slow_page_that_lost_streaming_progress_keeps_each_event_id_on_its_record_line(tmp_path: Path) -> None:
    hub = EventHub()
    recorder = Recorder(tmp_path, listeners=[hub.publish])
    recorder.emit("run_start", job={"name": "live"}, model="scripted")
    sse = _stream(Followed(tmp_path, hub), 0)
    first = await anext(sse)
    assert first.id == "1"
    for n in range(SUBSCRIBER_QUEUE * 2):  # the page reads nothing meanwhile: half its queue is dropped
        recorder.emit("model_stream", tokens=n + 1, text="x")
        recorder.emit("file_written", path=f"f{n}.txt", size=n)
    recorder.emit("run_end", status="ok")
    hub.close()
    received = [event async for event in sse]
    recorder.close()

    lines = (tmp_path / RECORD_FILE).read_text().splitlines()
    numbered = [(int(e.id), json.loads(e.data)) for e in received if e.id is not None]
    assert numbered and numbered[-1][1]["type"] == "run_end"
    for number, data in numbered:  # the id a reconnecting browser sends back names this line
        line = json.loads(lines[number - 1])
        assert (line["type"], line.get("path")) == (data["type"], data.get("path")), (number, data, line)
    lost = [json.loads(e.data)["count"] for e in received if json.loads(e.data)["type"] == "events_lost"]
    assert sum(lost) + len(numbered) + 1 == len(lines)  # every record line: shown, or counted as lost
