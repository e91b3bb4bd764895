"""What a job asks of its sandbox: which backend, which limits, and that backend's own options.

Backend-specific settings live in a table named for the backend (`[sandbox.docker]` in a job
file, `SandboxSpec(docker={...})` in code), validated by that backend's `options_model`: the
spec itself knows no backend.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .limits import Limits
from .defaults import default_backend_name


class SandboxSpec(BaseModel):
    """The sandbox of one job. Every backend reads the same spec."""

    model_config = ConfigDict(extra="allow")  # backend tables, checked by `jobs` and the backend

    backend: str = Field(default_factory=default_backend_name)
    limits: Limits = Field(default_factory=Limits)

    def options_for(self, backend: str) -> dict[str, Any]:
        """The raw `[sandbox.<backend>]` table (empty when the job has none)."""
        value = (self.model_extra or {}).get(backend, {})
        return value.model_dump() if isinstance(value, BaseModel) else dict(value)
