"""`run_job` under `coderoom mcp --ray`: the run goes to the cluster as one job of `coderoom
batch --ray` does, through batch's own `RayJobs` (nothing of it copied): a task placed by the
server's limits, its inputs sent bounded (`batch.transfer`), its run folder brought back through
the exit policy (`cluster.transfer.unpack_run_folder`), its streamed replies' progress relayed
(`cluster.progress`).

A node lost mid-job: the job runs again elsewhere, as in a batch (Ray's retries, NODE_RETRIES),
each lost attempt's partial record kept as a run folder of its own and named in the answer. Why
retried rather than reported at once: a job is a fresh run from its inputs, and a client that
asked for one result should get it when the cluster can still give it; when it cannot (every
retry lost), the tool's error names the cause. A client's cancel (MCP cancellation, or a dropped
HTTP request under `presence`'s rules) cancels the task on its node (`ray.cancel(force=True)`:
its worker and the sandbox under it end) and keeps the record so far in the run folder.

`JobEnd` is how a run ended, here or there, for the one answer `tools` builds of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..batch.manifest import BatchEntry
from ..batch.runner import EndOfRun, JobOutcome, LostAttempt
from ..errors import RecordError, SandboxUnavailable
from ..jobs import Job
from ..record.events import Listener, RunEnd
from ..record.reader import read_record


@dataclass(frozen=True)
class Check:
    path: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class JobEnd:
    """How a run_job ended: its run folder here, and on a cluster the node that ran it."""

    status: str
    run_dir: Path
    error: str | None = None
    checks: list[Check] = field(default_factory=list)
    final_output: str = ""
    saved: list[str] = field(default_factory=list)
    node: str | None = None
    host: str | None = None
    lost: tuple[LostAttempt, ...] = ()

    @classmethod
    def of_run(cls, result: Any) -> JobEnd:
        """Of `run.run_job`'s `RunResult` (a run on this machine)."""
        return cls(
            result.status, result.run_dir, result.error, [Check(c.path, c.ok, c.detail) for c in result.checks],
            result.final_output, list(result.saved.saved),
        )  # fmt: skip

    @classmethod
    def of_cluster_job(cls, outcome: JobOutcome, run_dir: Path) -> JobEnd:
        """Of a cluster job's outcome and the run folder it brought back (read as any run
        folder is: bounded, each line checked), whose run_end gives the outputs and the answer."""
        end = _run_end(run_dir)
        base = cls(outcome.status, run_dir, outcome.error, node=outcome.node, host=outcome.host, lost=outcome.lost)
        if end is None:
            return base
        return cls(
            base.status, run_dir, base.error, [Check(o.path, o.ok, o.detail) for o in end.outputs], end.final_output,
            list(end.saved), base.node, base.host, base.lost,
        )  # fmt: skip


def _run_end(run_dir: Path) -> RunEnd | None:
    try:
        events = read_record(run_dir).events
    except RecordError:  # none came back (an error before the run began), or not a record
        return None
    last = events[-1] if events else None
    return last if isinstance(last, RunEnd) else None


async def on_cluster(jobs: Any, job: Job, run_dir: Path, listeners: Sequence[Listener]) -> JobOutcome:
    """Run `job` on the cluster (`jobs`: the server's `batch.cluster.RayJobs`) into `run_dir`,
    known by its run folder's name (unique among the server's runs, so concurrent calls' attempts
    and progress stay apart); refused at once when no node could ever hold its limits."""
    from ..cluster.connect import room_for

    problem = await asyncio.to_thread(room_for, job.sandbox.limits)
    if problem is not None:
        raise SandboxUnavailable(f"no node of the Ray cluster can run this job: it {problem}")
    entry = BatchEntry(run_dir.name, job, "run_job")
    outcome: JobOutcome = await jobs.run(entry, run_dir, EndOfRun(), listeners)
    return outcome
