"""`coderoom batch --ray ADDRESS`: each job a Ray task on an existing cluster, placed by its
limits (num_cpus from `cpus`, memory from `memory`), run on its node by `on_node.run_on_node`
(the same `run_one` as on one machine), its run folder sent back and written under --out as a
local run's, the node named in batch.jsonl.

coderoom never starts a cluster: `cluster.connect.connect` joins the one at ADDRESS (or, with `auto`, the one
`ray start` left on this machine or RAY_ADDRESS names) and refuses when there is none. Ray's
errors stop here: joining is a usage error (exit 2), a job Ray could not finish is that job's
"error" outcome with the Ray error's first line.

A node lost mid-job: Ray runs the task again elsewhere (at most NODE_RETRIES times); each
attempt sent its record lines to the driver's `AttemptLog` as it went, so an attempt that did not
finish is written as a run folder of its own (its partial record) and listed in the job's one
end line (`lost`). `--model-concurrency N`: one `models.budget.ModelSlots` actor on the driver's
node leases N slots, and every job's model requests, on any node, hold one while in flight. Only the model's settings (OPENAI_*, CODEROOM_MODEL*) go to the nodes, not the
driver's whole environment.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..cluster.connect import first_line, model_environ, room_for
from ..cluster.driver_only import claimed
from ..cluster.progress import LazyBox, relay_reports
from ..cluster.transfer import unpack_run_folder
from ..errors import UsageError
from ..hostile.archive import ArchiveError
from ..interrupts import finish_uncancelled
from ..models.base import client_settings
from ..models.budget import ModelSlots, lease_seconds
from ..record.events import Listener
from ..record.names import RECORD_FILE
from ..run import new_run_dir
from .ledger import MAX_LOST, NodeSaid, bounded_error
from .manifest import BatchEntry
from .on_node import AttemptLog, NodeResult, Place, run_on_node
from .runner import EndOfRun, JobOutcome, LostAttempt
from .transfer import pack_inputs

NODE_RETRIES = 3  # times Ray runs a job again when its node or worker is lost
CANCEL_WAIT_S = 5.0  # a cancelled job's partial record: how long the driver waits for it


def check_fits(entries: Iterable[BatchEntry]) -> None:
    """Each job fits on some live node (else Ray would wait forever): a usage error naming it."""
    for entry in entries:
        problem = room_for(entry.job.sandbox.limits)
        if problem is not None:
            raise UsageError(f"job {entry.key}: {problem}")


def _attempt(entry: BatchEntry, inputs: bytes, run_name: str, environ: Mapping[str, str], log: Any, slots: Any,
             progress: Any = None) -> Any:
    """The Ray task: where it runs, told to the driver's log and waited for (so the log is up
    and the record lines that follow, sent without waiting, reach it as they are written),
    then the job (`on_node.run_on_node`)."""
    import ray

    place = Place(ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address())
    attempt = secrets.token_hex(8)
    ray.get(log.begin.remote(entry.key, attempt, place))
    return run_on_node(entry, inputs, run_name, environ, log, place, attempt, slots, progress)


def _write_record(run_dir: Path, lines: Sequence[str]) -> None:
    """An attempt's record lines as `run_dir`'s record, which appears whole: a reader (a page,
    `show`, a test) that looks while it is written sees no record or all of it, never a part."""
    partial = run_dir / f"{RECORD_FILE}.partial"
    partial.write_text("".join(lines), encoding="ascii")
    os.replace(partial, run_dir / RECORD_FILE)


def _problem(result: NodeResult) -> str | None:
    """What is wrong with a node's result (its fields are whatever the node pickled), or None."""
    outcome, place = result.outcome, result.place
    if not (isinstance(outcome, JobOutcome) and isinstance(place, Place) and isinstance(result.folder, bytes | None)):
        return "a result of the wrong shape"
    fields = ("status", "duration_s", "outputs_ok", "outputs", "tokens", "error", "signal")
    try:
        NodeSaid.model_validate({name: getattr(outcome, name) for name in fields} | {"node": place.node, "host": place.host})
    except ValidationError as exc:
        return f"a result whose {', '.join(sorted({str(e['loc'][0]) for e in exc.errors()}))} is not valid"
    return None


class RayJobs:
    """The `runner.JobRunner` of a `--ray` batch (after `connect`): a job a task on the cluster.
    `run` is the same with listeners on this side: the MCP server's `run_job` under `--ray`."""

    def __init__(self, environ: Mapping[str, str], out: Path, model_concurrency: int | None = None) -> None:
        """`model_concurrency`: at most that many model requests in flight among every node's
        jobs, through one `ModelSlots` actor on the driver's node that each request leases a slot of."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._ray = ray
        self._out = out
        self._environ = model_environ(environ)
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self._log: Any = ray.remote(AttemptLog).options(num_cpus=0, scheduling_strategy=here).remote()
        self._log_token = claimed(self._log)
        self._slots: Any = None
        if model_concurrency is not None:
            lease_s = lease_seconds(client_settings(environ)[1])
            self._slots = ray.remote(ModelSlots).options(num_cpus=0, scheduling_strategy=here).remote(model_concurrency, lease_s)
        self._progress = LazyBox(ray)  # the jobs' box and its token, made at the first run with listeners
        self._task = ray.remote(_attempt)

    async def __call__(self, entry: BatchEntry, run_dir: Path, end: EndOfRun) -> JobOutcome:
        return await self.run(entry, run_dir, end)

    async def run(self, entry: BatchEntry, run_dir: Path, end: EndOfRun, listeners: Sequence[Listener] = ()) -> JobOutcome:
        """Run `entry` on some node into `run_dir` here; with `listeners`, its streamed replies'
        progress (`cluster.progress`) reaches them as a local run's does. `entry.key` names the
        job among those running at once (its attempts, its progress)."""
        ray = self._ray
        try:
            inputs = pack_inputs(entry.job)
        except (UsageError, OSError) as exc:
            return JobOutcome(entry.key, run_dir.name, "error", error=bounded_error(str(exc)))
        limits = entry.job.sandbox.limits
        box: Any = None  # a run nobody listens to sends no progress, and needs no box
        token: Any = None
        try:  # the job's place in the log and the box, made before its node can begin or report (R-D7, R-D2)
            await self._log.open.remote(entry.key, self._log_token)
            if listeners:
                box, token = await asyncio.to_thread(self._progress)
                await box.open.remote(entry.key, token)
        except ray.exceptions.RayError as exc:  # the driver's node's actors gone
            return self._failed(entry, run_dir, f"the cluster could not run it ({first_line(exc)})", ())
        ref = self._task.options(
            num_cpus=limits.cpus, memory=limits.memory, max_retries=NODE_RETRIES, retry_exceptions=False
        ).remote(entry, inputs, run_dir.name, self._environ, self._log, self._slots, box)
        relay = None
        if box is not None:
            relay = asyncio.ensure_future(relay_reports(box, entry.key, listeners, ray.exceptions.RayError))
        try:
            result = await ref
        except asyncio.CancelledError:
            ray.cancel(ref, force=True)
            end.before = "interrupted: the batch was stopped, and the job on its node"
            # not cut by a cancel that is delivered again (an MCP call's cancel scope): bounded by CANCEL_WAIT_S
            await finish_uncancelled(self._keep_partial(entry, run_dir))
            raise
        except ray.exceptions.RayError as exc:  # its lost attempts' records, kept as R-D4's are
            lost = await finish_uncancelled(self._lost(entry, None))
            return self._failed(entry, run_dir, f"the cluster could not run it ({first_line(exc)})", lost)
        finally:
            if relay is not None:
                relay.cancel()
                box.close.remote(entry.key, token)  # what came after the last relay: forgotten, not awaited
        # the job is over on its node: its record and run folder are brought back even if the
        # caller is cancelled meanwhile (a cut `_lost` had taken the attempts, the folder never came: R-D4)
        return await finish_uncancelled(self._brought_back(entry, run_dir, result))

    async def _brought_back(self, entry: BatchEntry, run_dir: Path, result: object) -> JobOutcome:
        """A finished task's result, as hostile as its node (R-D1): its shape and the outcome's
        fields checked as the ledger checks them (`ledger.NodeSaid`), then its run
        folder unpacked through the exit policy."""
        if not isinstance(result, NodeResult):
            return self._failed(entry, run_dir, f"its node sent back {type(result).__name__}, not a result", ())
        lost = await self._lost(entry, final=result.attempt)
        problem = _problem(result)
        if problem is not None:
            return self._failed(entry, run_dir, f"its node sent back {problem}", lost)
        if result.folder is not None:
            try:
                unpack_run_folder(result.folder, run_dir)
            except (OSError, ArchiveError) as exc:
                return self._failed(entry, run_dir, f"its run folder could not be read back: {exc}", lost)
        return replace(result.outcome, error=bounded_error(result.outcome.error), run_dir=run_dir.name,
                       node=result.place.node, host=result.place.host, lost=lost)

    @staticmethod
    def _failed(entry: BatchEntry, run_dir: Path, error: str, lost: tuple[LostAttempt, ...]) -> JobOutcome:
        return JobOutcome(entry.key, run_dir.name, "error", error=bounded_error(error), lost=lost)

    async def _lost(self, entry: BatchEntry, final: str | None) -> tuple[LostAttempt, ...]:
        """Each attempt but `final` as a run folder of its own holding its partial record."""
        try:
            attempts = await self._log.take.remote(entry.key)
        except self._ray.exceptions.RayError:  # the log went with the driver's node: nothing kept
            return ()
        lost = []
        for attempt_id, attempt in list(attempts.items())[:MAX_LOST]:
            if attempt_id == final:
                continue
            folder = new_run_dir(entry.job, base=self._out)
            _write_record(folder, attempt.lines)
            lost.append(LostAttempt(folder.name, attempt.place.node, attempt.place.host))
        return tuple(lost)

    async def _keep_partial(self, entry: BatchEntry, run_dir: Path) -> None:
        """A cancelled job's record so far, into its own run folder (the last attempt's), if
        the log answers within CANCEL_WAIT_S. An attempt that had written no line yet (still
        starting on its node) leaves no record file: an empty one is no record."""
        try:
            attempts = await asyncio.wait_for(self._log.take.remote(entry.key), CANCEL_WAIT_S)
        except (TimeoutError, self._ray.exceptions.RayError):
            return
        lines = list(attempts.values())[-1].lines if attempts else ()
        if lines:
            _write_record(run_dir, lines)
