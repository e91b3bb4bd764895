"""The Docker backend's own options: `[sandbox.docker]` in a job file."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..spec import SandboxSpec
from .labels import DEFAULT_IMAGE


class DockerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    image: str = Field(default=DEFAULT_IMAGE, description="the sandbox image")
    packages: list[str] = Field(
        default_factory=list, description="extra pip packages, baked into a derived image"
    )


def docker_options(spec: SandboxSpec) -> DockerOptions:
    return DockerOptions.model_validate(spec.options_for("docker"))
