"""Shared fixtures: the sandbox suite runs once per backend; datasets come from ../shared; tests of
what is not the sandbox (sessions, the page, export, MCP) may run on the fake backend instead."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from backends import BACKENDS, require_backend
from coderoom.sandboxes import get_backend

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


def fake_without_bubblewrap(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake backend (tests/support/plugins: no isolation), found through its entry point, to
    hand to the session code; bubblewrap is made unusable while `monkeypatch` lasts (the local
    backend's start, client and availability fail), so a test on the fake proves it needs none."""
    local = get_backend("local")

    def no_bubblewrap(*args: object, **kwargs: object) -> None:
        raise AssertionError("a test on the fake backend reached the local (bubblewrap) backend")

    for method in ("start", "client", "unavailable_reason", "prestart"):
        monkeypatch.setattr(local, method, no_bubblewrap, raising=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "sandbox backend 'fake' runs code on the host", UserWarning)
        return get_backend("fake", unconfined_no_isolation=True)


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> Any:
    return fake_without_bubblewrap(monkeypatch)
