"""Shared fixtures: the sandbox suite runs once per backend; datasets come from ../shared."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends import BACKENDS, require_backend

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
