"""A job's streamed-reply progress (`model_stream` events) on its way from the cluster node that
runs it to the driver, bounded, so a caller on the driver (the MCP client of `run_job`) sees the
same progress as when the job runs on the driver's own machine.

Why its own path: the record lines a node sends (`batch.on_node`) are the record's, and a reply's
progress is no line of it (`record.events.LIVE_ONLY`); before this, a node dropped it.

Bounded both ways: the node sends at most one report each `streaming.REPORT_EVERY_S`, the
reports it held back merged into the next (`NodeProgress`: the latest counts, the text pieces
joined up to `streaming.MAX_PIECE_CHARS`); `ProgressBox`, an actor on the driver's node, keeps at
most MAX_PENDING reports per job, each at most MAX_REPORT_BYTES, of at most MAX_JOBS jobs (the
oldest dropped first); the
driver reads each as hostile data (`read_report`: its size, JSON, then the `ModelStream` model,
nothing else) and its listeners render it escaped, as they do a local run's. Nothing here imports
Ray: `batch.cluster` makes `ProgressBox` an actor.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import ValidationError

from ..models.streaming import MAX_PIECE_CHARS, REPORT_EVERY_S
from ..record.events import Event, ModelStream
from ..record.writer import encode

MAX_REPORT_BYTES = 64 * 1024  # of one report (MAX_PIECE_CHARS of text, JSON-escaped, and its counts)
MAX_PENDING = 32  # reports a job's box holds for the driver (it takes them each REPORT_EVERY_S)
MAX_JOBS = 1024  # jobs a box holds reports of (a late report of a finished job stays until pushed out)


class ProgressBoxHandle(Protocol):
    """The Ray actor handle of a `ProgressBox` (its methods called with `.remote`)."""

    put: Any


class NodeProgress:
    """On the node: a record listener that sends the job's `model_stream` events to `box` under
    `key`, at most one each REPORT_EVERY_S; held-back reports are merged into the next, and sent
    before the next record event (a reply's last count comes before its `model_call`)."""

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
        elif self._held is not None:
            self.flush()

    def flush(self) -> None:
        if self._held is not None:
            self._box.put.remote(self._key, encode(self._held))  # fire and forget: ordered, one caller
            self._held, self._last = None, self._clock()


def _merged(held: ModelStream, later: ModelStream) -> ModelStream:
    """`later`'s counts, with the text both carry (within MAX_PIECE_CHARS)."""
    return later.model_copy(update={"text": (held.text + later.text)[:MAX_PIECE_CHARS]})


class ProgressBox:
    """On the driver's node (a Ray actor): each running job's reports, until the driver takes
    them. Bounded: at most MAX_PENDING reports a job, each at most MAX_REPORT_BYTES of ASCII (as
    `record.writer.encode` writes), the oldest dropped when the driver falls behind; at most
    MAX_JOBS jobs, the one heard of first dropped (a report that came after its job's end)."""

    def __init__(self) -> None:
        self._jobs: dict[str, deque[str]] = {}

    def put(self, key: str, report: str) -> None:
        if not (isinstance(report, str) and report.isascii() and len(report) <= MAX_REPORT_BYTES):
            return
        if key not in self._jobs and len(self._jobs) >= MAX_JOBS:
            del self._jobs[next(iter(self._jobs))]
        self._jobs.setdefault(key, deque(maxlen=MAX_PENDING)).append(report)

    def take(self, key: str) -> list[str]:
        """The job's reports so far, forgotten here."""
        found = self._jobs.pop(key, None)
        return list(found) if found is not None else []


def read_report(report: object) -> ModelStream | None:
    """A node's report as a `ModelStream` event, or None when it is anything else: bounded in
    size, parsed as JSON, validated as the event's model (its text is still the model's, to be
    rendered escaped)."""
    if not isinstance(report, str) or len(report) > MAX_REPORT_BYTES:
        return None
    try:
        return ModelStream.model_validate(json.loads(report))
    except (ValueError, ValidationError):  # JSONDecodeError is a ValueError
        return None
