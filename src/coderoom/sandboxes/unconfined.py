"""The SDK's own `unix_local` backend, unchanged: no isolation. For comparison and benchmarks only."""

from __future__ import annotations

from typing import Any

from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

from .spec import SandboxSpec


class UnconfinedBackend:
    name = "unix_local"

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        return None

    def client(self, spec: SandboxSpec) -> tuple[UnixLocalSandboxClient, Any]:
        return UnixLocalSandboxClient(), None


backend = UnconfinedBackend()
