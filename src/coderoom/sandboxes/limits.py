"""The resource limits a job puts on its sandbox, shared by every backend.

Each backend enforces them its own way (cgroups/rlimits for `local`, container settings for
`docker`); this module says what the limits are (their values, defaults and size parsing, with no
pydantic, are in `limit_values`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from .limit_values import CPU_KILL_GRACE_S, DEFAULTS, MINIMUM_SIZES, MINIMUM_TOOL_OUTPUT_CHARS, parse_size, shown_size

__all__ = ["CPU_KILL_GRACE_S", "Limits", "MINIMUM_SIZES", "parse_size", "shown_size"]

ByteSize = Annotated[int, BeforeValidator(parse_size)]


class Limits(BaseModel):
    """What one sandbox may use. Defaults are safe for the analysis of a data file."""

    model_config = ConfigDict(extra="forbid")

    timeout: float = Field(default=DEFAULTS["timeout"], gt=0, description="wall-clock seconds per command")
    memory: ByteSize = Field(default=DEFAULTS["memory"], description="memory for the whole sandbox")
    cpus: float = Field(default=DEFAULTS["cpus"], gt=0, description="CPU share (docker), cores")
    cpu_time: int = Field(default=DEFAULTS["cpu_time"], gt=0, description="CPU seconds per process (RLIMIT_CPU)")
    pids: int = Field(default=DEFAULTS["pids"], gt=0, description="processes and threads in the sandbox")
    file_size: ByteSize = Field(default=DEFAULTS["file_size"], description="largest single file written")
    workspace_size: ByteSize = Field(default=DEFAULTS["workspace_size"], description="total workspace bytes")
    tmp_size: ByteSize = Field(default=DEFAULTS["tmp_size"], description="private /tmp tmpfs size")
    output_bytes: ByteSize = Field(default=DEFAULTS["output_bytes"], description="captured stdout/stderr per stream")
    tool_output_chars: int = Field(
        default=DEFAULTS["tool_output_chars"],
        ge=MINIMUM_TOOL_OUTPUT_CHARS,
        description="characters of one tool result the model reads (the rest is saved in the workspace)",
    )
    network: bool = Field(default=DEFAULTS["network"], description="allow network access from the sandbox")

    @field_validator(*MINIMUM_SIZES)
    @classmethod
    def _not_tiny(cls, value: int, info: ValidationInfo) -> int:
        name = info.field_name
        assert name is not None
        minimum = MINIMUM_SIZES[name]
        if value < minimum:
            raise ValueError(
                f"{name} = {value} bytes is under the {shown_size(minimum)} minimum; a plain number "
                f"is bytes: write e.g. '{value}M' for megabytes"
            )
        return value
