"""`coderoom batch --ray ADDRESS`: each job a Ray task on an existing cluster, placed by its
limits (num_cpus from `cpus`, memory from `memory`), run on its node by `on_node.run_on_node`
(the same `run_one` as on one machine), its run folder sent back and written under --out as a
local run's, the node named in batch.jsonl.

coderoom never starts a cluster: `connect` joins the one at ADDRESS (or, with `auto`, the one
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
import importlib.util
import logging
import os
import re
import secrets
import socket
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import UsageError, missing_extra
from ..hostile.archive import ArchiveError
from ..models.base import client_settings
from ..models.budget import ModelSlots, lease_seconds
from ..record.names import RECORD_FILE
from ..run import new_run_dir
from ..sandboxes.limits import shown_size
from .ledger import MAX_LOST, bounded_error
from .manifest import BatchEntry
from .on_node import AttemptLog, NodeResult, Place, run_on_node
from .runner import EndOfRun, JobOutcome, LostAttempt
from .transfer import pack_inputs, unpack_run_folder

NODE_RETRIES = 3  # times Ray runs a job again when its node or worker is lost
MODEL_ENV_PREFIXES = ("OPENAI_", "CODEROOM_MODEL")
ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
CANCEL_WAIT_S = 5.0  # a cancelled job's partial record: how long the driver waits for it
CONNECT_TIMEOUT_S = 10.0  # for the head's port to answer at all


def connect(address: str) -> None:
    """Join the running cluster at `address` (HOST:PORT of its head, or `auto`); usage errors."""
    target = _resolved(address)
    host = target.rpartition(":")[0].strip("[]")
    os.environ.pop("RAY_ADDRESS", None)  # Ray would prefer it to the address given
    if host in LOOPBACK:
        # Ray turns a loopback address into this machine's network address (so that other
        # machines could join); a cluster kept on loopback is reached only on loopback.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    if not _installed("ray"):
        raise UsageError(missing_extra("--ray", "ray", "ray"))
    _answers(address, target)
    import ray

    try:
        ray.init(address=target, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as exc:  # ConnectionError, RuntimeError, ValueError, grpc's: all "no cluster here"
        raise UsageError(
            f"--ray {address}: no Ray cluster to join at {target} ({_first_line(exc)}); coderoom does not start one: "
            "start it with `ray start --head` (docs/scale.md)"
        ) from None


def _installed(package: str) -> bool:
    """Whether `package` can be imported (asked without importing it: Ray takes seconds)."""
    try:
        return importlib.util.find_spec(package) is not None
    except ImportError:
        return False


def _answers(address: str, target: str) -> None:
    """Something listens at `target`: Ray itself would retry a closed port for minutes."""
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise UsageError(
            f"--ray {address}: nothing answers at {target} ({exc.strerror or exc}); coderoom does not "
            "start a cluster: start it with `ray start --head` (docs/scale.md)"
        ) from None


def _resolved(address: str) -> str:
    """HOST:PORT: as given, or for `auto` RAY_ADDRESS or the cluster `ray start` last started on
    this machine (its address file, as Ray's own `auto` finds it, if this user wrote it); never a
    cluster of our own."""
    if address == "auto":
        found = os.environ.get("RAY_ADDRESS", "").strip()
        if not found:
            current = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray" / "ray_current_cluster"
            try:
                with current.open("rb") as file:
                    owner = os.fstat(file.fileno()).st_uid
                    found = file.read(300).decode("ascii", "replace").strip()
            except OSError:
                raise UsageError(
                    "--ray auto: no Ray cluster found on this machine (no RAY_ADDRESS, no `ray start` "
                    "cluster); coderoom does not start one: start it with `ray start --head` (docs/scale.md)"
                ) from None
            if owner != os.getuid():  # /tmp/ray is anyone's to create: the key would go to their cluster
                raise UsageError(
                    f"--ray auto: {current} is owned by another user (uid {owner}); give the head's "
                    "address as --ray HOST:PORT"
                )
        address = found
    if not ADDRESS.fullmatch(address):
        raise UsageError(f"--ray {address}: expected HOST:PORT of a running Ray head (ray start --head), or auto")
    return address


def check_fits(entries: Iterable[BatchEntry]) -> None:
    """Each job fits on some live node (else Ray would wait forever): a usage error naming it."""
    import ray

    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    for entry in entries:
        cpus, memory = entry.job.sandbox.limits.cpus, entry.job.sandbox.limits.memory
        if not any(node.get("CPU", 0) >= cpus and node.get("memory", 0) >= memory for node in nodes):
            most_cpus = max((node.get("CPU", 0) for node in nodes), default=0)
            most_memory = max((node.get("memory", 0) for node in nodes), default=0)
            raise UsageError(
                f"job {entry.key}: needs {cpus:g} cpus and {shown_size(memory)} of memory on one node; "
                f"the cluster's nodes have at most {most_cpus:g} cpus and {shown_size(int(most_memory))} "
                "(lower --limit cpus / --memory, or add a larger node)"
            )


def model_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """What of the driver's environment a node needs: the model's settings only."""
    return {name: value for name, value in environ.items() if name.startswith(MODEL_ENV_PREFIXES)}


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: " + (str(exc).strip().splitlines() or [""])[0][:300]


def _attempt(entry: BatchEntry, inputs: bytes, run_name: str, environ: Mapping[str, str], log: Any, slots: Any) -> Any:
    """The Ray task: where it runs, told to the driver's log and waited for (so the log is up
    and the record lines that follow, sent without waiting, reach it as they are written),
    then the job (`on_node.run_on_node`)."""
    import ray

    place = Place(ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address())
    attempt = secrets.token_hex(8)
    ray.get(log.begin.remote(entry.key, attempt, place))
    return run_on_node(entry, inputs, run_name, environ, log, place, attempt, slots)


class RayJobs:
    """The `runner.JobRunner` of a `--ray` batch (after `connect`): a job a task on the cluster."""

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
        self._slots: Any = None
        if model_concurrency is not None:
            lease_s = lease_seconds(client_settings(environ)[1])
            self._slots = ray.remote(ModelSlots).options(num_cpus=0, scheduling_strategy=here).remote(model_concurrency, lease_s)
        self._task = ray.remote(_attempt)

    async def __call__(self, entry: BatchEntry, run_dir: Path, end: EndOfRun) -> JobOutcome:
        ray = self._ray
        try:
            inputs = pack_inputs(entry.job)
        except (UsageError, OSError) as exc:
            return JobOutcome(entry.key, run_dir.name, "error", error=bounded_error(str(exc)))
        limits = entry.job.sandbox.limits
        ref = self._task.options(
            num_cpus=limits.cpus, memory=limits.memory, max_retries=NODE_RETRIES, retry_exceptions=False
        ).remote(entry, inputs, run_dir.name, self._environ, self._log, self._slots)
        try:
            result = await ref
        except asyncio.CancelledError:
            ray.cancel(ref, force=True)
            end.before = "interrupted: the batch was stopped, and the job on its node"
            await self._keep_partial(entry, run_dir)
            raise
        except ray.exceptions.RayError as exc:
            return self._failed(entry, run_dir, f"the cluster could not run it ({_first_line(exc)})", await self._lost(entry, None))
        if not isinstance(result, NodeResult):
            return self._failed(entry, run_dir, f"its node sent back {type(result).__name__}, not a result", ())
        lost = await self._lost(entry, final=result.attempt)
        if result.folder is not None:
            try:
                unpack_run_folder(result.folder, run_dir)
            except (OSError, ArchiveError) as exc:
                return self._failed(entry, run_dir, f"its run folder could not be read back: {exc}", lost)
        return replace(result.outcome, run_dir=run_dir.name, node=result.place.node, host=result.place.host, lost=lost)

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
            (folder / RECORD_FILE).write_text("".join(attempt.lines), encoding="ascii")
            lost.append(LostAttempt(folder.name, attempt.place.node, attempt.place.host))
        return tuple(lost)

    async def _keep_partial(self, entry: BatchEntry, run_dir: Path) -> None:
        """A cancelled job's record so far, into its own run folder (the last attempt's), if
        the log answers within CANCEL_WAIT_S."""
        try:
            attempts = await asyncio.wait_for(self._log.take.remote(entry.key), CANCEL_WAIT_S)
        except (TimeoutError, self._ray.exceptions.RayError):
            return
        if attempts:
            last = list(attempts.values())[-1]
            (run_dir / RECORD_FILE).write_text("".join(last.lines), encoding="ascii")
