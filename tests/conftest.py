"""Shared fixtures: the sandbox suite runs once per backend; datasets come from ../shared; tests of
what is not the sandbox (sessions, the page, export, MCP) may run on the fake backend instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from backends import BACKENDS, fake_without_bubblewrap, require_backend

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


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake backend, bubblewrap unusable for the test (see `backends.fake_without_bubblewrap`)."""
    return fake_without_bubblewrap(monkeypatch)
