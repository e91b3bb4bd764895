"""What a job asks of its sandbox: which backend, which limits, and that backend's own options.

Backend-specific settings live in a table named for the backend (`[sandbox.docker]` in a job
file, `SandboxSpec(docker={...})` in code), validated by that backend's `options_model`: the
spec itself knows no backend. `[sandbox.network]` (the allowlist: allow, resolve, secrets) is
no backend's: it becomes the `egress` limit, so every surface reads it from `limits`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, model_validator

from ..egress.policy import parse_policy
from .defaults import default_backend_name
from .limits import JOB_FILE_SOURCE, NETWORK_SOURCE, Limits, limits_table, parse_limits


def _limits(value: object) -> Limits:
    """A `Limits` as it is; a table (a job file's, a serialized session state's) through the one
    parser, whose UsageError pydantic reports at the `limits` key (see `jobs._describe`)."""
    return value if isinstance(value, Limits) else parse_limits(value, source=JOB_FILE_SOURCE)  # type: ignore[arg-type]


# `Limits` as a field of a pydantic model: validated by `parse_limits`, dumped as a plain table.
LimitsField = Annotated[Limits, PlainValidator(_limits), PlainSerializer(limits_table)]


class SandboxSpec(BaseModel):
    """The sandbox of one job. Every backend reads the same spec."""

    model_config = ConfigDict(extra="allow")  # backend tables, checked by `jobs` and the backend

    backend: str = Field(default_factory=default_backend_name)
    limits: LimitsField = Field(default_factory=Limits)

    @model_validator(mode="before")
    @classmethod
    def _network_table(cls, data: Any) -> Any:
        """`[sandbox.network]` into `limits.egress` (a UsageError naming the table if it is bad)."""
        if not isinstance(data, Mapping) or "network" not in data:
            return data
        data = dict(data)
        policy = parse_policy(data.pop("network"), source=NETWORK_SOURCE)
        limits = data.get("limits", {})
        if isinstance(limits, Limits):
            data["limits"] = parse_limits({"egress": policy}, source=NETWORK_SOURCE, base=limits)
        elif isinstance(limits, Mapping):
            data["limits"] = {**limits, "egress": policy}
        return data

    def options_for(self, backend: str) -> dict[str, Any]:
        """The raw `[sandbox.<backend>]` table (empty when the job has none)."""
        value = (self.model_extra or {}).get(backend, {})
        return value.model_dump() if isinstance(value, BaseModel) else dict(value)
