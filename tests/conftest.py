"""Shared fixtures: the sandbox suite runs once per backend; datasets come from ../shared; tests of
what is not the sandbox (sessions, the page, export, MCP) may run on the fake backend instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import BACKENDS, fake_without_bubblewrap, require_backend
from ray_cluster import Head, SharedHead, joined_cluster, require_ray

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


@pytest.fixture(scope="module")
def ray_sessions_cluster(request: pytest.FixtureRequest) -> Iterator[tuple[Any, list[Any]]]:
    """For the tests of live sessions on Ray: Ray's one-machine multi-node cluster, a head with
    no CPUs and the module's RAY_NODES nodes (3 unless it says) of RAY_NODE_CPUS CPUs (1 unless
    it says: each session, cpus = 1, then takes a node of its own); joined by this process as
    `serve --ray` joins it (`ray_cluster.joined_cluster`); (the started head, the nodes).
    Sandboxes are real (local backend)."""
    require_backend("local")
    workers, cpus = getattr(request.module, "RAY_NODES", 3), getattr(request.module, "RAY_NODE_CPUS", 1)
    with joined_cluster(workers=workers, cpus=cpus) as (started, nodes):
        yield started, nodes


SHARED_HEAD = SharedHead()
_LAST_ON_SHARED_HEAD: list[pytest.Item] = []


@pytest.fixture(scope="session")
def shared_ray_head() -> Iterator[Head]:
    """A real Ray head (`ray start --head` on 127.0.0.1, two CPUs, local sandboxes on its node)
    shared by the modules that send it work (`ray_cluster.SharedHead`); a test that changes what
    the head's processes inherit (their environment) or loses a node starts its own instead."""
    require_ray()
    require_backend("local")
    try:
        yield SHARED_HEAD.start()
    finally:
        SHARED_HEAD.stop()


@pytest.hookimpl(trylast=True)  # after -k / -m deselected theirs
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    users = [item for item in items if "shared_ray_head" in getattr(item, "fixturenames", ())]
    _LAST_ON_SHARED_HEAD[:] = users[-1:]


@pytest.hookimpl(trylast=True)  # after the test's own fixtures (a module's joined driver) are torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if item in _LAST_ON_SHARED_HEAD:
        SHARED_HEAD.stop()


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake backend, bubblewrap unusable for the test (see `backends.fake_without_bubblewrap`)."""
    return fake_without_bubblewrap(monkeypatch)
