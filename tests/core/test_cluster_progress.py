"""A job's streamed-reply progress on its way from a cluster node to the driver
(`cluster.progress`), without a cluster: the node sends at most one report each REPORT_EVERY_S,
merging what it held back, and flushes before the next record event; the driver's box is bounded
in reports, bytes and jobs; a report is read as hostile data (size, JSON, the ModelStream model)."""

from __future__ import annotations

import json
from typing import Any

from coderoom.cluster.progress import MAX_JOBS, MAX_PENDING, MAX_REPORT_BYTES, NodeProgress, ProgressBox, read_report
from coderoom.models.streaming import MAX_PIECE_CHARS, REPORT_EVERY_S
from coderoom.record.events import ModelCall, ModelStart, ModelStream, ToolResult, ToolStart
from coderoom.record.writer import encode


class Box:
    """The driver's box as the node calls it (`box.put.remote(key, report)`), in this process."""

    def __init__(self) -> None:
        self.box = ProgressBox()
        self.box.open("job", self.box.claim())  # as the driver does before the job's task starts
        self.put = self

    def remote(self, key: str, report: str) -> None:
        self.box.put(key, report)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def stream(tokens: int, text: str) -> ModelStream:
    return ModelStream(tokens=tokens, chars=len(text), text=text)


def taken(box: Box, key: str = "job") -> list[Any]:
    return [event for report in box.box.take(key) if (event := read_report(report)) is not None]


def test_the_node_sends_one_report_per_interval_merging_the_text_it_held_back() -> None:
    box, clock = Box(), Clock()
    progress = NodeProgress(box, "job", clock)
    progress(stream(1, "a"))  # the first goes at once
    clock.now += REPORT_EVERY_S / 4
    progress(stream(2, "b"))
    progress(stream(3, "c"))
    assert [(e.tokens, e.text) for e in taken(box)] == [(1, "a")]
    clock.now += REPORT_EVERY_S
    progress(stream(4, "d"))
    assert [(e.tokens, e.text) for e in taken(box)] == [(4, "bcd")]


def test_a_held_back_report_goes_before_the_next_record_event_and_the_steps_go_as_they_come() -> None:
    box, clock = Box(), Clock()
    progress = NodeProgress(box, "job", clock)
    progress(ModelStart(turn=1))
    progress(stream(1, "a"))
    progress(stream(9, "rest"))  # held: too soon
    progress(ModelCall(turn=1))
    progress(ToolStart(call_id="c1", name="exec_command", arguments="{}"))
    progress(ToolResult(call_id="c1", name="exec_command", output="done"))  # no step of a progress line
    assert [(e.type, getattr(e, "tokens", None)) for e in taken(box)] == [
        ("model_start", None), ("model_stream", 1), ("model_stream", 9), ("model_call", None), ("tool_start", None)]


def test_a_step_over_one_report_s_bytes_is_not_sent() -> None:
    box = Box()
    NodeProgress(box, "job")(ToolStart(call_id="c1", name="write", arguments="x" * MAX_REPORT_BYTES))
    assert taken(box) == []


def test_merged_text_stays_within_one_report_s_piece() -> None:
    box, clock = Box(), Clock()
    progress = NodeProgress(box, "job", clock)
    progress(stream(1, "x"))
    for n in range(2, 10):
        progress(stream(n, "y" * MAX_PIECE_CHARS))
    progress.flush()
    last = taken(box)[-1]
    assert last.tokens == 9 and len(last.text) == MAX_PIECE_CHARS


def test_the_box_keeps_the_latest_reports_of_a_job_and_a_bounded_number_of_jobs() -> None:
    box = ProgressBox()
    token = box.claim()  # the driver's (`cluster.driver_only`)
    box.open("job", token)
    for n in range(MAX_PENDING + 10):
        box.put("job", encode(stream(n, "")))
    kept = [read_report(r) for r in box.take("job")]
    assert [e.tokens for e in kept if e is not None] == list(range(10, MAX_PENDING + 10))
    assert box.take("job") == []  # taken: forgotten
    for n in range(MAX_JOBS + 1):
        box.open(f"job{n}", token)
        box.put(f"job{n}", encode(stream(n, "")))
    assert box.take("job0") == [] and len(box.take(f"job{MAX_JOBS}")) == 1


def test_the_box_refuses_oversized_and_non_ascii_reports() -> None:
    box = ProgressBox()
    token = box.claim()  # the driver's (`cluster.driver_only`)
    box.open("job", token)
    box.put("job", "x" * (MAX_REPORT_BYTES + 1))
    box.put("job", json.dumps({"type": "model_stream", "text": "é"}, ensure_ascii=False))
    box.put("job", 42)  # type: ignore[arg-type]
    assert box.take("job") == []


def hostile(**fields: Any) -> str:
    return json.dumps({"type": "model_stream", **fields})


def test_only_a_well_formed_model_stream_report_is_read() -> None:
    assert read_report(hostile(tokens=3, text="\x1b]52;c;ZXZpbA==\x07")).text.startswith("\x1b")  # escaped where shown
    assert read_report(json.dumps({"type": "tool_start", "call_id": "c", "name": "exec", "arguments": ""})).name == "exec"
    refused = [
        "not json", "[]", hostile(tokens="many"), hostile(rate="fast"), json.dumps({"type": "run_end", "status": "ok"}),
        hostile(text="a" * MAX_REPORT_BYTES), b"{}", None, json.dumps({"type": ["model_stream"]}),
    ]
    assert [read_report(r) for r in refused] == [None] * len(refused)
