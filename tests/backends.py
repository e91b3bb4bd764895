"""Which sandbox backends a test may use here. Docker is skipped only where no engine runs; with
CODEROOM_REQUIRE_DOCKER=1 (as in CI) a missing engine fails instead, so CI never skips silently."""

from __future__ import annotations

import os

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
