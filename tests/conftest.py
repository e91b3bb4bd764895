"""Shared fixtures: the sandbox suite runs once per backend; datasets come from ../shared; tests of
what is not the sandbox (sessions, the page, export, MCP) may run on the fake backend instead."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import BACKENDS, fake_without_bubblewrap, require_backend
from ray_cluster import Head, Kept, joined, multi_node_cluster, nodes_intact, ray_head, require_ray

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"../shared is absent ({SHARED}); the datasets live there")
    return SHARED


KEPT = {"shared_ray_head": Kept(), "ray_sessions_cluster": Kept()}
KEEP_BETWEEN = 2  # modules between two users of a cluster that it is kept through (`Kept`)
_STOP_AFTER: dict[str, set[Any]] = {name: set() for name in KEPT}  # the modules after which it stops


@pytest.fixture(scope="module")
def ray_sessions_cluster(request: pytest.FixtureRequest) -> Iterator[tuple[Any, list[Any]]]:
    """For the tests of live sessions on Ray: Ray's one-machine multi-node cluster, a head with
    no CPUs and the module's RAY_NODES nodes (3 unless it says) of RAY_NODE_CPUS CPUs (1 unless
    it says: each session, cpus = 1, then takes a node of its own); joined by this process as
    `serve --ray` joins it (`ray_cluster.joined`); (the started head, the nodes).
    Sandboxes are real (local backend). A module asking for the same cluster (nodes, CPUs and the
    TMPDIR its nodes inherit) soon after gets it again if it still has its nodes (`ray_cluster.Kept`)."""
    require_backend("local")
    workers, cpus = getattr(request.module, "RAY_NODES", 3), getattr(request.module, "RAY_NODE_CPUS", 1)
    started, nodes = KEPT["ray_sessions_cluster"].get(
        (workers, cpus, os.environ.get("TMPDIR")), lambda: multi_node_cluster(workers=workers, cpus=cpus),
        lambda kept: nodes_intact(*kept),
    )
    with joined(started.address):
        yield started, list(nodes)  # a module's own list: one that adds a node changes only its own
    if request.module in _STOP_AFTER["ray_sessions_cluster"]:
        KEPT["ray_sessions_cluster"].stop()


@pytest.fixture(scope="module")
def ray_pool_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, list[Any]]]:
    """`ray_sessions_cluster` for the warm-pool tests: its nodes' TMPDIR (where each actor makes
    its own folder) is the module's own, set before the cluster starts, so what the actors leave
    there is theirs alone."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(tmp_path_factory.mktemp("nodes-tmp")))
        yield request.getfixturevalue("ray_sessions_cluster")


@pytest.fixture(scope="module")
def shared_ray_head(request: pytest.FixtureRequest) -> Iterator[Head]:
    """A real Ray head (`ray start --head` on 127.0.0.1, two CPUs, local sandboxes on its node)
    shared by the modules that send it work (`ray_cluster.Kept`); a test that changes what the
    head's processes inherit (their environment) or loses a node starts its own instead."""
    require_ray()
    require_backend("local")
    yield KEPT["shared_ray_head"].get("head", lambda: ray_head(num_cpus=2), lambda head: True)
    if request.module in _STOP_AFTER["shared_ray_head"]:
        KEPT["shared_ray_head"].stop()


@pytest.hookimpl(trylast=True)  # after -k / -m deselected theirs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules after which each kept cluster stops: those whose next user is more than
    KEEP_BETWEEN modules further on (or that have none)."""
    functions = [item for item in items if isinstance(item, pytest.Function)]
    modules = list(dict.fromkeys(item.module for item in functions))
    for name in KEPT:
        users = {item.module for item in functions if name in item.fixturenames}
        using = [at for at, module in enumerate(modules) if module in users]
        _STOP_AFTER[name] = {modules[this] for this, after in zip(using, [*using[1:], None])
                             if after is None or after - this > KEEP_BETWEEN + 1}  # fmt: skip


def pytest_sessionfinish() -> None:
    """Whatever is still kept (a run stopped early by -x): stopped by its PID."""
    for kept in KEPT.values():
        kept.stop()


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake backend, bubblewrap unusable for the test (see `backends.fake_without_bubblewrap`)."""
    return fake_without_bubblewrap(monkeypatch)
