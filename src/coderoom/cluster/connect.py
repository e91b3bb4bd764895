"""Joining a Ray cluster, shared by every `--ray` command (`batch`, `serve`, `mcp`): the one
place that decides which cluster is joined (`connect`: never one of our own, loopback kept on
loopback), whether a sandbox of given limits fits on some live node (`room_for`, `nodes_holding`:
else Ray would wait forever), what the cluster has free now (`busy_for`, for a live session's
refusal: the room itself is taken atomically by `placement.reserve`), what of the driver's environment travels to the nodes (`model_environ`: the
model's settings only) and how a Ray error is told in one line (`first_line`).

Nothing here imports Ray at module level: `ray` takes seconds to import, and a command without
`--ray` never pays for it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..errors import UsageError, missing_extra
from ..sandboxes.limits import Limits, shown_size

MODEL_ENV_PREFIXES = ("OPENAI_", "CODEROOM_MODEL")
ADDRESS = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
CONNECT_TIMEOUT_S = 10.0  # for the head's port to answer at all


def _stay_on_loopback() -> None:
    """Ray turns a loopback address into this machine's network address (so that other machines
    could join) unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER is 0; a cluster kept on loopback is
    reached only on loopback. Ray reads that variable once, when `ray._private.ray_constants` is
    first imported (and `services.get_node_ip_address` reads the constant at each call), so a
    process that imported ray before joining gets the constant set too: without it, such a driver
    dialled the machine's network address and never reached a head listening on 127.0.0.1."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False  # type: ignore[attr-defined]


def connect(address: str) -> None:
    """Join the running cluster at `address` (HOST:PORT of its head, or `auto`); usage errors."""
    target = _resolved(address)
    host = target.rpartition(":")[0].strip("[]")
    os.environ.pop("RAY_ADDRESS", None)  # Ray would prefer it to the address given
    if host in LOOPBACK:
        _stay_on_loopback()
    if not _installed("ray"):
        raise UsageError(missing_extra("--ray", "ray", "ray"))
    _answers(address, target)
    import ray

    try:
        ray.init(address=target, log_to_driver=False, logging_level=logging.ERROR)
    except Exception as exc:  # ConnectionError, RuntimeError, ValueError, grpc's: all "no cluster here"
        raise UsageError(
            f"--ray {address}: no Ray cluster to join at {target} ({first_line(exc)}); coderoom does not start one: "
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


def nodes_holding(limits: Limits) -> set[str]:
    """The ids of the live nodes large enough, when empty, for a sandbox of `limits` (cpus as
    Ray's num_cpus, memory as its memory): where it can be placed at all, and where a warm pool
    per node keeps sandboxes (`service.ray_pool`)."""
    import ray

    return {
        str(node["NodeID"]) for node in ray.nodes()
        if node.get("Alive") and node["Resources"].get("CPU", 0) >= limits.cpus and node["Resources"].get("memory", 0) >= limits.memory
    }  # fmt: skip


def room_for(limits: Limits) -> str | None:
    """None when a sandbox of `limits` fits on some live node of the joined cluster
    (`nodes_holding`); else what the largest nodes have, for the refusal."""
    import ray

    if nodes_holding(limits):
        return None
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    most_cpus = max((node.get("CPU", 0) for node in nodes), default=0)
    most_memory = max((node.get("memory", 0) for node in nodes), default=0)
    return (
        f"needs {limits.cpus:g} cpus and {shown_size(limits.memory)} of memory on one node; "
        f"the cluster's nodes have at most {most_cpus:g} cpus and {shown_size(int(most_memory))} "
        "(lower --limit cpus / --memory, or add a larger node)"
    )


def busy_for(limits: Limits) -> str | None:
    """None when the cluster has, free now, the cpus and memory of `limits` (summed over its live
    nodes: when even the sum falls short no node has room); else what is free, for the refusal.
    Only what the refusal of a live session says: the room itself is taken atomically
    (`placement.reserve`), as a check of the free resources cannot (attack R-B1)."""
    import ray

    free = ray.available_resources()
    free_cpus, free_memory = free.get("CPU", 0), free.get("memory", 0)
    if free_cpus >= limits.cpus and free_memory >= limits.memory:
        return None
    return (
        f"needs {limits.cpus:g} cpus and {shown_size(limits.memory)} of memory; the cluster has "
        f"{free_cpus:g} cpus and {shown_size(int(free_memory))} free now (its nodes are busy: close a "
        "session, or try again later)"
    )


def model_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """What of the driver's environment a node needs: the model's settings only."""
    return {name: value for name, value in environ.items() if name.startswith(MODEL_ENV_PREFIXES)}


def first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: " + (str(exc).strip().splitlines() or [""])[0][:300]
