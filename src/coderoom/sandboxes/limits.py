"""The resource limits a job puts on its sandbox, shared by every backend.

Each backend enforces them its own way (cgroups/rlimits for `local`, container settings for
`docker`); this module only says what the limits are and parses the human forms ("512M").
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(value: object) -> int:
    """Turn 512M, 2G, 1.5GiB or a plain byte count into bytes."""
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string like '512M'")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("a size must be positive")
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match:
            number, unit = match.groups()
            size = int(float(number) * _UNITS[unit.upper()])
            if size > 0:
                return size
    raise ValueError(f"{value!r} is not a size; use bytes or a string like '512M' or '2G'")


ByteSize = Annotated[int, BeforeValidator(parse_size)]

# Below these a sandbox cannot start Python or keep a file (`memory = 1` made every command die
# with exit 139), so a smaller value is a mistake: usually a plain number meant as megabytes.
MINIMUM_SIZES = {
    "memory": 16 * 1024**2,
    "workspace_size": 1024**2,
    "tmp_size": 1024**2,
    "file_size": 64 * 1024,
    "output_bytes": 256,
}
# RLIMIT_CPU's hard limit is this much over the soft one: at the soft limit the kernel sends
# SIGXCPU, which names the cpu_time limit (see `stops`); with soft = hard it sends SIGKILL,
# which looks like an OOM kill. A process that ignores SIGXCPU is killed a second later.
CPU_KILL_GRACE_S = 1
# Below this a cut tool result is mostly the marker that says where the rest is.
MINIMUM_TOOL_OUTPUT_CHARS = 1000


def shown_size(size: int) -> str:
    """`size` the way a job file would write it: 64M, 2G, or bytes."""
    for unit, factor in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size} bytes"


class Limits(BaseModel):
    """What one sandbox may use. Defaults are safe for the analysis of a data file."""

    model_config = ConfigDict(extra="forbid")

    timeout: float = Field(default=120.0, gt=0, description="wall-clock seconds per command")
    memory: ByteSize = Field(default=2 * 1024**3, description="memory for the whole sandbox")
    cpus: float = Field(default=1.0, gt=0, description="CPU share (docker), cores")
    cpu_time: int = Field(default=600, gt=0, description="CPU seconds per process (RLIMIT_CPU)")
    pids: int = Field(default=256, gt=0, description="processes and threads in the sandbox")
    file_size: ByteSize = Field(default=1024**3, description="largest single file written")
    workspace_size: ByteSize = Field(default=2 * 1024**3, description="total workspace bytes")
    tmp_size: ByteSize = Field(default=256 * 1024**2, description="private /tmp tmpfs size")
    output_bytes: ByteSize = Field(default=1024**2, description="captured stdout/stderr per stream")
    tool_output_chars: int = Field(
        default=16_000,
        ge=MINIMUM_TOOL_OUTPUT_CHARS,
        description="characters of one tool result the model reads (the rest is saved in the workspace)",
    )
    network: bool = Field(default=False, description="allow network access from the sandbox")

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
