"""What a job asks of its sandbox: which backend, which runtime, which limits."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .limits import Limits
from .registry import DEFAULT_IMAGE, default_backend_name


class SandboxSpec(BaseModel):
    """The sandbox of one job. Every backend reads the same spec."""

    model_config = ConfigDict(extra="forbid")

    backend: str = Field(default_factory=default_backend_name)
    limits: Limits = Field(default_factory=Limits)
    image: str = Field(default=DEFAULT_IMAGE, description="docker: the sandbox image")
    packages: list[str] = Field(
        default_factory=list, description="docker: extra pip packages, baked into a derived image"
    )
