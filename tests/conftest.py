"""Shared fixtures. The sandbox suite runs once per backend; Docker is skipped only where no engine runs
(set CODEROOM_REQUIRE_DOCKER=1, as CI does, to turn that skip into a failure)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coderoom.sandboxes import get_backend, SandboxSpec

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
BACKENDS = ["local", "docker"]


def require_backend(name: str) -> None:
    reason = get_backend(name).unavailable_reason(SandboxSpec(backend=name))
    if reason is None:
        return
    if name == "docker" and os.environ.get("CODEROOM_REQUIRE_DOCKER") != "1":
        pytest.skip(f"docker backend unavailable: {reason}")
    pytest.fail(f"{name} backend unavailable: {reason}")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return request.param


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"../shared is absent ({SHARED}); the datasets live there")
    return SHARED
