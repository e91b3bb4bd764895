"""The SDK's own `unix_local` backend, unchanged: no isolation. For comparison and benchmarks only."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

from .spec import SandboxSpec


class UnconfinedBackend:
    name = "unix_local"
    leftovers = "session folder"
    isolates = False
    summary = "NO ISOLATION: the SDK's unix_local runs code on the host, for comparison only"

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        if spec.limits.egress is not None:
            return "the unconfined backend isolates nothing, so an allowlist could not hold; use --sandbox local or --sandbox docker"
        return None

    def client(self, spec: SandboxSpec) -> tuple[UnixLocalSandboxClient, Any]:
        return UnixLocalSandboxClient(), None

    def options_model(self) -> type[BaseModel]:
        from .local.options import LocalOptions

        return LocalOptions

    def prepare(self, spec: SandboxSpec, progress: Any) -> None:
        """Nothing to prepare."""

    def prune(self, skipped: list[str] | None = None) -> int:
        return 0

    def info(self) -> str:
        return "nothing: no limit is enforced (no isolation)"

    def commands(self) -> None:
        return None


backend = UnconfinedBackend()
