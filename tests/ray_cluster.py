"""Ray clusters on this machine for the `--ray` tests, on loopback only, each stopped by its PID.

Ray skips only where it is not installed; with CODEROOM_REQUIRE_RAY=1 (as in CI) a missing Ray
fails instead, so CI never skips these tests silently.

Ray 2.60 turns a loopback node address into the machine's network address (so that other
machines could join) and then listens on every interface; RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
keeps the node's address 127.0.0.1 and every Ray server on it (`LOOPBACK_ENV`).

A lost node is noticed by Ray's own health checks (the GCS asking each raylet); Ray's defaults
(every 3 s, dead after 5 failures) made each node-loss test wait about 13 s for that; these
clusters check every second and call a node dead after 3 failures (`HEALTH_CHECK_ENV`, Ray's own
settings: what a node loss does is unchanged, only how soon it is seen, about 4 s).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

NODE_ID = re.compile(r"Setting node ID node_id=([0-9a-f]{56})")
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
HEALTH_CHECK_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3"}
START_DEADLINE_S = 180  # Ray starts slowly on 2 busy cores
# the `ray` command of this Python (a venv with system site-packages has no `ray` script of its own)
RAY = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.argv[0] = 'ray'; sys.exit(main())"]


def require_ray() -> None:
    """Ray is installed (asked without importing it: see `LOOPBACK_ENV`), or a skip/failure."""
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CODEROOM_REQUIRE_RAY") == "1":
            pytest.fail("Ray is not installed: pip install 'coderoom[ray]'")
        pytest.skip("Ray is not installed: pip install 'coderoom[ray]' (CODEROOM_REQUIRE_RAY=1 makes this a failure)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def short_temp_dir() -> Path:
    """Ray's sockets live under its temp dir, and a socket path is at most 107 bytes."""
    return Path(tempfile.mkdtemp(prefix="cr-ray-", dir="/tmp"))


@dataclass(frozen=True)
class Head:
    address: str
    pid: int
    temp_dir: Path

    def node_id(self) -> str:
        """The head node's id, as its raylet logged it."""
        for log in self.temp_dir.glob("session_*/logs/raylet.out"):
            found = NODE_ID.search(log.read_text(errors="replace"))
            if found:
                return found.group(1)
        raise AssertionError(f"no node id in {self.temp_dir}'s raylet.out")


@contextmanager
def ray_head(num_cpus: int = 2) -> Iterator[Head]:
    """`ray start --head` on 127.0.0.1 (no dashboard), kept in the foreground (`--block`) so its
    PID is the cluster's: SIGTERM to it stops every process it started."""
    port, temp_dir = free_port(), short_temp_dir()
    log = (temp_dir / "head.log").open("w")
    process = subprocess.Popen(
        [*RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--disable-usage-stats",
         f"--num-cpus={num_cpus}", "--include-dashboard=false", f"--temp-dir={temp_dir}", "--block"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **LOOPBACK_ENV, **HEALTH_CHECK_ENV}, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while "Ray runtime started" not in (temp_dir / "head.log").read_text(errors="replace"):
            assert process.poll() is None, (temp_dir / "head.log").read_text(errors="replace")
            assert time.monotonic() < deadline, "the Ray head did not start"
            time.sleep(0.5)
        yield Head(f"127.0.0.1:{port}", process.pid, temp_dir)
    finally:
        stop(process)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


class Kept:
    """A Ray cluster (a context manager's value) kept from one test module to the next that asks
    for the same one (its `key`), rather than started and stopped for each: a head took 13-15 s to
    start and stop on 2 busy cores, a multi-node cluster 17-20 s. Another key stops the kept one
    first (never two of a kind at once), as does `stop`, which the fixtures of tests/conftest.py
    call after a module whose next user is more than KEEP_BETWEEN modules on: a cluster does not
    idle through the rest of the suite. Each module joins and leaves it on its own."""

    def __init__(self) -> None:
        self._running: ExitStack | None = None
        self._key: object = None
        self._value: Any = None

    def get(self, key: object, start: Callable[[], AbstractContextManager[Any]], intact: Callable[[Any], bool]) -> Any:
        """The kept value if it has this key and is still `intact`, else `start()`'s."""
        if self._running is not None and self._key == key and intact(self._value):
            return self._value
        self.stop()
        running = ExitStack()
        self._value, self._key, self._running = running.enter_context(start()), key, running
        return self._value

    def stop(self) -> None:
        running, self._running, self._value = self._running, None, None
        if running is not None:
            running.close()


def running(node: Any) -> bool:
    """The node's raylet runs (a removed node has none)."""
    raylet = node.all_processes.get("raylet")
    return bool(raylet) and raylet[0].process.poll() is None


def nodes_intact(cluster: Any, nodes: list[Any]) -> bool:
    """The cluster still has exactly these nodes, each with its raylet running: none was lost or
    removed (`lose_node`) and none added (`add_node`) by the module that had it before."""
    return cluster.worker_nodes == set(nodes) and all(map(running, nodes))


@contextmanager
def multi_node_cluster(workers: int = 2, cpus: int = 1) -> Iterator[tuple[Any, list[Any]]]:
    """Ray's own one-machine multi-node cluster (`ray.cluster_utils.Cluster`): a head that runs
    nothing (no CPUs) and `workers` nodes of `cpus` CPUs each, all on 127.0.0.1; (cluster, nodes).
    A node can be removed as a machine is lost (`lose_node`). Every process is stopped by its PID
    afterwards (Cluster.shutdown). Ray must not be imported before (`LOOPBACK_ENV`)."""
    require_ray()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in LOOPBACK_ENV.items():  # before Ray is imported: its servers on 127.0.0.1 only
            patch.setenv(name, value)
        for name, value in HEALTH_CHECK_ENV.items():  # read by the cluster's processes as they start
            patch.setenv(name, value)
        from ray._private import ray_constants
        from ray.cluster_utils import Cluster

        assert not ray_constants.ENABLE_RAY_CLUSTER, "Ray was imported before LOOPBACK_ENV was set"
        temp_dir = str(short_temp_dir())
        # Cluster.add_node writes the head's address into RAY_TMPDIR/ray (/tmp/ray by default),
        # which it does not create: kept in this cluster's own folder, not anyone's /tmp/ray
        patch.setenv("RAY_TMPDIR", temp_dir)
        (Path(temp_dir) / "ray").mkdir()
        one_machine = {"node_ip_address": "127.0.0.1", "temp_dir": temp_dir}
        head_args = {"num_cpus": 0, "include_dashboard": False, **one_machine}
        started = Cluster(initialize_head=True, head_node_args=head_args)
        try:
            nodes = [started.add_node(num_cpus=cpus, **one_machine) for _ in range(workers)]
            yield started, nodes
        finally:
            started.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)


def lose_node(cluster: Any, node: Any) -> None:
    """The machine goes at once: the processes under its raylet frozen (a worker outliving its
    raylet could still hand a result back), the node's Ray processes killed with no grace, then
    the frozen ones killed."""
    frozen = descendants(node.all_processes["raylet"][0].process.pid)
    for pid in frozen:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    cluster.remove_node(node, allow_graceful=False)
    for pid in frozen:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the head by its PID; its process group (started for it alone) if it will not go."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def descendants(pid: int) -> dict[int, str]:
    """The processes under process `pid` (read from /proc), by PID, with their names."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            names[int(entry.name)] = (entry / "comm").read_text().strip()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
    found = {}
    for child, name in names.items():
        current, steps = child, 0
        while current > 1 and steps < 64:
            current, steps = parents.get(current, 0), steps + 1
            if current == pid:
                found[child] = name
                break
    return found


def has_descendant(pid: int, name: str) -> bool:
    """Whether a process called `name` runs under process `pid`."""
    return name in descendants(pid).values()


def ray_session_manager(runs: Path, opener: Any = None) -> Any:
    """A SessionManager opening each session (cpus = 1, the offline model) as a Ray actor on a
    node of the joined cluster through `opener` (a `RayOpener`; None: one with the servers'
    settings), its run folders coming back into `runs`."""
    from coderoom import SessionManager
    from coderoom.sandboxes.limits import Limits
    from coderoom.service.ray_session import RayOpener

    return SessionManager(model="offline", runs_dir=runs, limits=Limits(cpus=1), opener=opener or RayOpener({}))


def left_on_the_node(run_name: str) -> list[Path]:
    """A session's temporary runs folder on its node (`SessionActor`), if still there (the nodes
    of these clusters share this machine's temp dir)."""
    return [folder for folder in Path(tempfile.gettempdir()).glob("coderoom-session-*") if (folder / run_name).is_dir()]


@contextmanager
def joined(address: str, by_value: str | None = None) -> Iterator[None]:
    """This process joined to the cluster at `address` as `serve --ray` joins it
    (`cluster.connect`), left afterwards: for a test module's fixture. `by_value` names a test
    module whose stand-ins run on the node (pickled by value: nodes cannot import tests/)."""
    import ray

    from coderoom.cluster.connect import connect

    connect(address)
    if by_value is not None:
        ray.cloudpickle.register_pickle_by_value(sys.modules[by_value])
    try:
        yield
    finally:
        ray.shutdown()


def add_node(cluster: Any, cpus: int) -> Any:
    """A node that joins `multi_node_cluster`'s cluster, on 127.0.0.1 as its others."""
    return cluster.add_node(num_cpus=cpus, node_ip_address="127.0.0.1", temp_dir=os.environ["RAY_TMPDIR"])


def live_actors() -> list[str]:
    """The ids of the cluster's actors that are alive or about to be (Ray's own table)."""
    from ray._private import state

    return [actor_id for actor_id, actor in state.actors().items() if actor["State"] != "DEAD"]
