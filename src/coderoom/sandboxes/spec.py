"""What a job asks of its sandbox: which backend, which runtime, which limits."""

from __future__ import annotations

import sys

from pydantic import BaseModel, ConfigDict, Field

from .limits import Limits

DEFAULT_IMAGE = "coderoom-sandbox:latest"


def default_backend_name() -> str:
    """`local` (bubblewrap) on Linux; elsewhere Docker is the only real boundary we ship."""
    return "local" if sys.platform.startswith("linux") else "docker"


class SandboxSpec(BaseModel):
    """The sandbox of one job. Every backend reads the same spec."""

    model_config = ConfigDict(extra="forbid")

    backend: str = Field(default_factory=default_backend_name)
    limits: Limits = Field(default_factory=Limits)
    image: str = Field(default=DEFAULT_IMAGE, description="docker: the sandbox image")
    packages: list[str] = Field(
        default_factory=list, description="docker: extra pip packages, baked into a derived image"
    )
