"""A job's progress on its way from the cluster node that runs it to the driver, bounded, so a
caller on the driver (the MCP client of `run_job`) sees the same progress as when the job runs on
the driver's own machine: its streamed replies (`model_stream` events) and the steps a progress
line names (`PROGRESS_TYPES`: a request sent, a reply come, a tool called).

Why its own path: the record lines a node sends (`batch.on_node`) go to the `AttemptLog`, kept for
a lost attempt's record, not handed to anyone as they come, and a reply's progress is no line of
the record (`record.events.LIVE_ONLY`); before this, a node dropped it.

Bounded both ways: the node sends at most one report each `streaming.REPORT_EVERY_S`, the
reports it held back merged into the next (`NodeProgress`: the latest counts, the text pieces
joined up to `streaming.MAX_PIECE_CHARS`); `ProgressBox`, an actor on the driver's node, keeps at
most MAX_PENDING reports per job, each at most MAX_REPORT_BYTES, of the jobs the driver opened
(at most MAX_JOBS): a report for any other key, a finished job's late one or a hostile node's
flood under made-up keys, is dropped, so it can neither push a running job's reports out nor
hold the driver's memory (R-D2); the driver reads each as hostile data (`read_report`: its size,
JSON, then the `ModelStream` model, nothing else) and its listeners render it escaped, as they do
a local run's (`relay_reports`). Nothing here imports Ray as it loads (a node's `NodeProgress`
needs none): `batch.cluster` (a job's, for MCP `run_job`) and `service.ray_session` (a live
session's ask, for the page and MCP) hand in Ray's module to `LazyBox`, which makes the
`ProgressBox` actor at the first ask, and relay its reports with `relay_reports`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pydantic import ValidationError

from ..models.streaming import MAX_PIECE_CHARS, REPORT_EVERY_S
from ..record.events import Event, Listener, ModelCall, ModelStart, ModelStream, ToolStart
from ..record.writer import encode
from .driver_only import DriverOnly, claimed

MAX_REPORT_BYTES = 64 * 1024  # of one report (MAX_PIECE_CHARS of text, JSON-escaped, and its counts)
MAX_PENDING = 32  # reports a job's box holds for the driver (it takes them each REPORT_EVERY_S)
PROGRESS_TYPES = (ModelStart, ModelCall, ToolStart)  # the record events a progress line names, sent as they come
MAX_JOBS = 1024  # jobs a box holds reports of (a late report of a finished job stays until pushed out)


class ProgressBoxHandle(Protocol):
    """The Ray actor handle of a `ProgressBox` (its methods called with `.remote`)."""

    put: Any


class NodeProgress:
    """On the node: a record listener that sends the job's `model_stream` events to `box` under
    `key`, at most one each REPORT_EVERY_S (held-back reports merged into the next, and sent
    before the next record event: a reply's last count comes before its `model_call`), and its
    PROGRESS_TYPES events as they come (one each a turn or a tool call; one over
    MAX_REPORT_BYTES, a tool call's long arguments, is not sent)."""

    def __init__(self, box: ProgressBoxHandle, key: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._box = box
        self._key = key
        self._clock = clock
        self._held: ModelStream | None = None
        self._last = float("-inf")

    def __call__(self, event: Event) -> None:
        if isinstance(event, ModelStream):
            self._held = event if self._held is None else _merged(self._held, event)
            if self._clock() - self._last >= REPORT_EVERY_S:
                self.flush()
            return
        self.flush()
        if isinstance(event, PROGRESS_TYPES) and len(line := encode(event)) <= MAX_REPORT_BYTES:
            self._box.put.remote(self._key, line)

    def flush(self) -> None:
        if self._held is not None:
            self._box.put.remote(self._key, encode(self._held))  # fire and forget: ordered, one caller
            self._held, self._last = None, self._clock()


def _merged(held: ModelStream, later: ModelStream) -> ModelStream:
    """`later`'s counts, with the text both carry (within MAX_PIECE_CHARS)."""
    return later.model_copy(update={"text": (held.text + later.text)[:MAX_PIECE_CHARS]})


class ProgressBox(DriverOnly):
    """On the driver's node (a Ray actor): each running job's reports, until the driver takes
    them. Only the driver makes room for a job (`open`, before its task starts; `close` at its
    end; both with the token of its `claim`, see `driver_only`): a node's `put` under a key not
    open is dropped. Bounded: at most MAX_PENDING reports a
    job, each at most MAX_REPORT_BYTES of ASCII (as `record.writer.encode` writes), the oldest
    dropped when the driver falls behind; at most MAX_JOBS open jobs (the driver's own running
    jobs; past it, the one opened first is closed)."""

    def __init__(self) -> None:
        self._jobs: dict[str, deque[str]] = {}

    def open(self, key: str, token: str | None) -> None:
        if not self._from_driver(token):
            return
        if key not in self._jobs and len(self._jobs) >= MAX_JOBS:
            del self._jobs[next(iter(self._jobs))]
        self._jobs.setdefault(key, deque(maxlen=MAX_PENDING))

    def close(self, key: str, token: str | None) -> None:
        if self._from_driver(token):
            self._jobs.pop(key, None)

    def put(self, key: str, report: str) -> None:
        found = self._jobs.get(key) if isinstance(key, str) else None
        if found is not None and isinstance(report, str) and report.isascii() and len(report) <= MAX_REPORT_BYTES:
            found.append(report)

    def take(self, key: str) -> list[str]:
        """The job's reports so far, forgotten here (the job stays open)."""
        found = self._jobs.get(key)
        if found is None:
            return []
        reports = list(found)
        found.clear()
        return reports


class LazyBox:
    """The driver's `ProgressBox` actor on its own node, made at the first call, and (a reference
    to) the token of its `claim`, asked first (`driver_only`). Why at the first call: a server
    whose sessions never ask, or a batch whose jobs nobody listens to, has no actor to make and
    keep. Blocking (a round trip to Ray's control store the first time): call it in a thread,
    never on the event loop. The actor lives as long as the owner's handle does (Ray ends it with
    its last handle or the driver)."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        self._made: tuple[Any, Any] | None = None
        self._lock = threading.Lock()  # two first asks at once make one box

    def __call__(self) -> tuple[Any, Any]:
        with self._lock:
            if self._made is None:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                here = NodeAffinitySchedulingStrategy(self._ray.get_runtime_context().get_node_id(), soft=False)
                box = self._ray.remote(ProgressBox).options(num_cpus=0, scheduling_strategy=here).remote()
                self._made = (box, claimed(box))
            return self._made


REPORTED = {model.model_fields["type"].default: model for model in (ModelStream, *PROGRESS_TYPES)}


def read_report(report: object) -> Event | None:
    """A node's report as a `ModelStream` or PROGRESS_TYPES event, or None when it is anything
    else: bounded in size, parsed as JSON, validated as its type's model (its strings are still
    the model's, to be rendered escaped)."""
    if not isinstance(report, str) or len(report) > MAX_REPORT_BYTES:
        return None
    try:
        data = json.loads(report)
        model = REPORTED.get(data.get("type")) if isinstance(data, dict) else None
        return model.model_validate(data) if model is not None else None  # type: ignore[return-value]
    except (ValueError, ValidationError, TypeError):  # JSONDecodeError is a ValueError; an unhashable "type"
        return None


async def relay_reports(box: Any, key: str, listeners: Sequence[Listener], box_gone: type[BaseException]) -> None:
    """Each REPORT_EVERY_S, `key`'s reports from `box` (a `ProgressBox` actor) to `listeners`,
    each read as hostile data (`read_report`), until cancelled; a box that does not answer
    (`box_gone`: Ray's `RayError`) ends the relay, not the run it reports on."""
    while True:
        await asyncio.sleep(REPORT_EVERY_S)
        try:
            reports = await box.take.remote(key)
        except box_gone:
            return
        for report in reports if isinstance(reports, list) else ():
            if (event := read_report(report)) is not None:
                for listener in listeners:
                    listener(event)
