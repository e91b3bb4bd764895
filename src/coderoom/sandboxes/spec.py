"""What a job asks of its sandbox: which backend, which limits, and that backend's own options.

Backend-specific settings live in a table named for the backend (`[sandbox.docker]` in a job
file, `SandboxSpec(docker={...})` in code), validated by that backend's `options_model`: the
spec itself knows no backend.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator

from .defaults import default_backend_name
from .limits import JOB_FILE_SOURCE, Limits, parse_limits


def _limits(value: object) -> Limits:
    """A `Limits` as it is; a table (a job file's, a serialized session state's) through the one
    parser, whose UsageError pydantic reports at the `limits` key (see `jobs._describe`)."""
    return value if isinstance(value, Limits) else parse_limits(value, source=JOB_FILE_SOURCE)  # type: ignore[arg-type]


# `Limits` as a field of a pydantic model: validated by `parse_limits`, dumped as a plain table.
LimitsField = Annotated[Limits, PlainValidator(_limits), PlainSerializer(asdict)]


class SandboxSpec(BaseModel):
    """The sandbox of one job. Every backend reads the same spec."""

    model_config = ConfigDict(extra="allow")  # backend tables, checked by `jobs` and the backend

    backend: str = Field(default_factory=default_backend_name)
    limits: LimitsField = Field(default_factory=Limits)

    def options_for(self, backend: str) -> dict[str, Any]:
        """The raw `[sandbox.<backend>]` table (empty when the job has none)."""
        value = (self.model_extra or {}).get(backend, {})
        return value.model_dump() if isinstance(value, BaseModel) else dict(value)
