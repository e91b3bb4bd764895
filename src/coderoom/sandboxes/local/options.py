"""The local backend's own options: `[sandbox.local]` in a job file."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class LocalOptions(BaseModel):
    """Nothing yet: the local sandbox runs the host's own Python, read-only."""

    model_config = ConfigDict(extra="forbid")
