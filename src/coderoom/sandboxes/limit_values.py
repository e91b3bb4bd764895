"""The limits' values with no pydantic: sizes parsed from their human forms ("512M"), the
minimums, the defaults, and `PlainLimits`. `limits.Limits` (the pydantic model every job and
spec uses) is built on these; the CLI's fast path (`coderoom sandbox run`) and the backends
read them without importing pydantic (about 25 ms of every start here).
"""

from __future__ import annotations

import re
from typing import TypedDict

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


class LimitDefaults(TypedDict):
    """Each limit's type, so `Limits`' fields and `PlainLimits`' attributes agree with it."""

    timeout: float
    memory: int
    cpus: float
    cpu_time: int
    pids: int
    file_size: int
    workspace_size: int
    tmp_size: int
    output_bytes: int
    tool_output_chars: int
    network: bool


# Every limit's default: `Limits` takes its field defaults from here.
DEFAULTS: LimitDefaults = {
    "timeout": 120.0,
    "memory": 2 * 1024**3,
    "cpus": 1.0,
    "cpu_time": 600,
    "pids": 256,
    "file_size": 1024**3,
    "workspace_size": 2 * 1024**3,
    "tmp_size": 256 * 1024**2,
    "output_bytes": 1024**2,
    "tool_output_chars": 16_000,
    "network": False,
}


class PlainLimits:
    """The defaults with some overrides, as attributes, for callers that checked those values as
    `Limits` would (see `cli.sandbox_run.plain_spec`): what a backend reads of `Limits`."""

    def __init__(self, **overrides: float | int | bool) -> None:
        unknown = set(overrides) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown limits: {sorted(unknown)}")
        self.__dict__.update({**DEFAULTS, **overrides})
