"""Shared fixtures: the sandbox suite runs once per backend; datasets come from ../shared; tests of
what is not the sandbox (sessions, the page, export, MCP) may run on the fake backend instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends import BACKENDS, fake_without_bubblewrap, require_backend
from ray_cluster import joined_cluster

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


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake backend, bubblewrap unusable for the test (see `backends.fake_without_bubblewrap`)."""
    return fake_without_bubblewrap(monkeypatch)
