"""The part of a `--ray` batch that runs on a cluster node: one job, through the same `run_one`
as on one machine, in the node's own sandbox backend, into a run folder on the node's disk that
goes back to the driver as bounded bytes (`cluster.transfer`).

Each attempt (Ray runs a job again when its node is lost) has an id of its own, has told the
driver's `AttemptLog` where it runs (`cluster._attempt`) and sends it each record line as it is
written, so what an attempt recorded before its node went away is still on the driver afterwards. Nothing here
imports Ray: `cluster` wraps these as a Ray task and actor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..errors import CoderoomError
from ..models.budget import ModelSlotsHandle, SlotsBudget
from ..record.events import LIVE_ONLY, Event, Listener
from ..record.writer import encode
from .ledger import MAX_LOST, valid_place
from .manifest import BatchEntry
from ..sandboxes.registry import prepare_backend
from .runner import JobOutcome, run_one
from ..cluster import node_folders
from ..cluster.driver_only import DriverOnly
from ..cluster.progress import NodeProgress, ProgressBoxHandle
from ..cluster.transfer import pack_back
from .transfer import unpack_inputs

MAX_PARTIAL_BYTES = 16 * 1024**2  # of one attempt's record, kept by the driver's AttemptLog


@dataclass(frozen=True)
class Place:
    """Where an attempt runs: the Ray node's id and its address."""

    node: str
    host: str


@dataclass(frozen=True)
class NodeResult:
    """What a node sends back: how the job ended, where, and its run folder as a tar (its record
    alone when it was over MAX_RUN_FOLDER_BYTES, None when even that was; the outcome says so)."""

    outcome: JobOutcome
    place: Place
    attempt: str
    folder: bytes | None


class RemoteMethod(Protocol):
    def remote(self, *args: Any) -> Any: ...


class AttemptLogHandle(Protocol):
    """The Ray actor handle of an `AttemptLog` (its methods called with `.remote`)."""

    begin: RemoteMethod
    line: RemoteMethod


def run_on_node(
    entry: BatchEntry,
    inputs: bytes,
    run_name: str,
    environ: Mapping[str, str],
    log: AttemptLogHandle,
    place: Place,
    attempt: str,
    slots: ModelSlotsHandle | None = None,
    progress: ProgressBoxHandle | None = None,
) -> NodeResult:
    """Run attempt `attempt` of `entry` here (the driver's log has been told it began), in a
    temporary folder removed afterwards (leased: `cluster.node_folders`), on this node's own backend (prepared as every command
    prepares it; a backend that cannot run here is the job's error, with its one-line reason);
    its model requests hold slots of the batch's `slots` actor, if any (`--model-concurrency`);
    its streamed replies' progress goes to the driver's `progress` box, if any (`cluster.progress`)."""
    try:
        prepare_backend(entry.job.sandbox, lambda line: None)
    except CoderoomError as exc:
        failed = JobOutcome(entry.key, run_name, "error", error=f"on node {place.host}: {exc.message}")
        return NodeResult(failed, place, attempt, None)

    def forward(event: Event) -> None:  # fire and forget: ordered, as calls from one caller are
        if event.type not in LIVE_ONLY:  # the record's lines only: a reply's progress is no line of it
            log.line.remote(entry.key, attempt, encode(event))

    with node_folders.leased(node_folders.BATCH_PREFIX) as tmp:  # a killed worker's: `sandbox prune` removes it
        copies = unpack_inputs(entry.job, inputs, tmp)
        run_dir = tmp / run_name
        budget = SlotsBudget(slots) if slots is not None else None
        listeners: list[Listener] = [forward] if progress is None else [forward, NodeProgress(progress, entry.key)]
        outcome = asyncio.run(run_one(entry, run_dir, environ, listeners=listeners, inputs_from=copies, budget=budget))
        folder, problem = pack_back(run_dir)
        if problem is not None:
            outcome = replace(outcome, status="error", error=problem)
    return NodeResult(outcome, place, attempt, folder)


@dataclass
class Attempt:
    place: Place
    lines: list[str] = field(default_factory=list)
    size: int = 0


class AttemptLog(DriverOnly):
    """On the driver's node (a Ray actor): each attempt's place and record lines as they come,
    until the driver takes a finished job's attempts. Bounded: only the driver makes room for a
    job (`open`, before its task starts; `take` ends it), at most MAX_LOST attempts a job, each
    keeping at most MAX_PARTIAL_BYTES of record, ASCII only (as `record.writer.encode` writes
    every line, and as the driver writes them); the lines are the node's, checked again when read
    as a record. Why the room: a node is handed this log, and attempts it began under keys of its
    own making, or without end under its own, were kept for the driver's life (R-D7). `open`
    takes the token of the driver's `claim` (`cluster.driver_only`: a node's handle could call
    it too, R-F10)."""

    def __init__(self) -> None:
        self._jobs: dict[str, dict[str, Attempt]] = {}

    def open(self, key: str, token: str | None) -> None:
        if self._from_driver(token):
            self._jobs.setdefault(key, {})

    def begin(self, key: str, attempt: str, place: Place) -> None:
        """An attempt begun where `place` says; one whose place is no node id and address (a
        hostile node's, to be named in an answer or the ledger: R-D1) is not kept, nor its lines."""
        found = self._jobs.get(key) if isinstance(key, str) else None
        if found is None or len(found) >= MAX_LOST or not isinstance(attempt, str):
            return
        if isinstance(place, Place) and valid_place(place.node, place.host):
            found[attempt] = Attempt(place)

    def line(self, key: str, attempt: str, text: str) -> None:
        found = self._jobs.get(key, {}).get(attempt)
        if found is not None and text.isascii() and found.size + len(text) <= MAX_PARTIAL_BYTES:
            found.lines.append(text)
            found.size += len(text)

    def take(self, key: str) -> dict[str, Attempt]:
        """The job's attempts, forgotten here."""
        return self._jobs.pop(key, {})
