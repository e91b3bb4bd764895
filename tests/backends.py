"""Which sandbox backends a test may use here. Docker is skipped only where no engine runs; with
CODEROOM_REQUIRE_DOCKER=1 (as in CI) a missing engine fails instead, so CI never skips silently.
The fake backend (no isolation) is not one of BACKENDS: tests of what is not the sandbox ask for it."""

from __future__ import annotations

import os
import warnings
from typing import Any

import pytest

from coderoom.sandboxes import SandboxSpec, backend_names, get_backend

BACKENDS = backend_names()  # every backend coderoom offers: a new one is tested by every suite


def require_backend(name: str) -> None:
    reason = get_backend(name, unconfined_no_isolation=name == "unix_local").unavailable_reason(
        SandboxSpec(backend=name)
    )
    if reason is None:
        return
    if name != "local" and os.environ.get("CODEROOM_REQUIRE_DOCKER") != "1":
        pytest.skip(f"{name} backend unavailable: {reason}")
    pytest.fail(f"{name} backend unavailable: {reason}")


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
