"""The resource limits a sandbox runs under, and the one parser every surface reads them with.

Each backend enforces them its own way (cgroups/rlimits for `local`, container settings for
`docker`); this module says what they are: their names, defaults, minimums and size forms
("512M"). `Limits` is a plain frozen dataclass, so `coderoom sandbox run`'s fast path, the
backends and the stop notes read it without pydantic (about 25 ms of every start here); job files
reach it through `spec.LimitsField`, flags through `limits_from_flags`, and both end in
`parse_limits`, so a bad value gets the same words whichever command or file gave it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..egress.rules import Policy  # data only: the parser (`egress.policy`) loads when an allowlist is given
from ..errors import UsageError

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_SHOWN_CHARS = 40  # of a refused value: it may come from a hostile record
_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}

# Below these a sandbox cannot start Python or keep a file (`memory = 1` made every command die
# with exit 139), so a smaller value is a mistake: usually a plain number meant as megabytes.
MINIMUM_SIZES = {
    "memory": 16 * 1024**2,
    "workspace_size": 1024**2,
    "tmp_size": 1024**2,
    "file_size": 64 * 1024,
    "output_bytes": 256,
    "egress_bytes": 1024,
}
# RLIMIT_CPU's hard limit is this much over the soft one: at the soft limit the kernel sends
# SIGXCPU, which names the cpu_time limit (see `stops`); with soft = hard it sends SIGKILL,
# which looks like an OOM kill. A process that ignores SIGXCPU is killed a second later.
CPU_KILL_GRACE_S = 1
# Below this a cut tool result is mostly the marker that says where the rest is.
MINIMUM_TOOL_OUTPUT_CHARS = 1000
# How a flag names the limit it sets, in every command's errors: "--limit memory: ...".
FLAG_SOURCE = "--limit"
# How a job file names it (and anything else read through `spec.LimitsField`).
JOB_FILE_SOURCE = "coderoom.toml [sandbox.limits]"
# Where a job file writes the allowlist (`egress`), and the flags that add to it.
NETWORK_SOURCE = "coderoom.toml [sandbox.network]"
NETWORK_FLAGS_HELP = (
    "--allow-host HOST[:PORT] (repeatable; *.domain for its subdomains; no port: 443 and 80) lets the "
    "sandbox reach only the hosts listed, through a proxy on this host; --resolve HOST=ADDRESS (repeatable) "
    "maps a name to an address, the only way a loopback or private address can be reached"
)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def parse_size(value: object) -> int:
    """Turn 512M, 2G, 1.5GiB or a plain byte count into bytes."""
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string like '512M'")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("a size must be positive")
        return value
    if isinstance(value, str) and len(value) <= _SHOWN_CHARS:
        match = _SIZE.match(value)
        if match:
            number, unit = match.groups()
            size = int(float(number) * _UNITS[unit.upper()])
            if size > 0:
                return size
    raise ValueError(f"{_shown(value)} is not a size; use bytes or a string like '512M' or '2G'")


def shown_size(size: int) -> str:
    """`size` the way a job file would write it: 64M, 2G, or bytes."""
    for unit, factor in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size} bytes"


def _size(name: str) -> Callable[[object], int]:
    def checked(value: object) -> int:
        size = parse_size(value)
        minimum = MINIMUM_SIZES[name]
        if size < minimum:
            raise ValueError(
                f"{name} = {size} bytes is under the {shown_size(minimum)} minimum; a plain number "
                f"is bytes: write e.g. '{size}M' for megabytes"
            )
        return size

    return checked


def _whole(minimum: int) -> Callable[[object], int]:
    def checked(value: object) -> int:
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and len(value) <= _SHOWN_CHARS:
            try:
                number = int(value.strip())
            except ValueError:
                pass
        if number is None or number < minimum:
            raise ValueError(f"{_shown(value)} is not a whole number of at least {minimum}")
        return number

    return checked


def _positive(value: object) -> float:
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and len(value) <= _SHOWN_CHARS:
        try:
            number = float(value.strip())
        except ValueError:
            pass
    if number is None or not (0 < number < math.inf):
        raise ValueError(f"{_shown(value)} is not a number above 0")
    return number


def _policy(value: object) -> Policy | None:
    if value is None:
        return None
    if isinstance(value, Policy):
        return value
    if isinstance(value, str):  # a --limit flag: the allowlist has flags of its own
        raise ValueError("set with --allow-host and --resolve, or [sandbox.network] in a job file")
    from ..egress.policy import parse_policy

    try:
        return parse_policy(value, source="egress")
    except UsageError as exc:
        raise ValueError(exc.message.replace("\n", "; ")) from None


def _switch(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{_shown(value)} is not true or false")


# Each limit's check: it takes the value in any form a job file or a flag may write it (and
# whatever a hostile record holds) and returns it in its one type, or raises ValueError.
_CHECKS: dict[str, Callable[[object], object]] = {
    "timeout": _positive,
    "memory": _size("memory"),
    "cpus": _positive,
    "cpu_time": _whole(1),
    "pids": _whole(1),
    "file_size": _size("file_size"),
    "workspace_size": _size("workspace_size"),
    "tmp_size": _size("tmp_size"),
    "output_bytes": _size("output_bytes"),
    "tool_output_chars": _whole(MINIMUM_TOOL_OUTPUT_CHARS),
    "network": _switch,
    "egress": _policy,
    "egress_bytes": _size("egress_bytes"),
    "egress_connections": _whole(1),
}


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use. Defaults are safe for the analysis of a data file.

    Every value passes its check when the object is made (`Limits(memory="512M")` holds 512 MiB;
    `Limits(memory=1)` raises ValueError), so no surface can hold a limit another would refuse."""

    timeout: float = 120.0  # wall-clock seconds per command
    memory: int = 2 * 1024**3  # memory for the whole sandbox
    cpus: float = 1.0  # CPU share (docker), cores
    cpu_time: int = 600  # CPU seconds per process (RLIMIT_CPU)
    pids: int = 256  # processes and threads in the sandbox
    file_size: int = 1024**3  # largest single file written
    workspace_size: int = 2 * 1024**3  # total workspace bytes
    tmp_size: int = 256 * 1024**2  # private /tmp tmpfs size
    output_bytes: int = 1024**2  # captured stdout/stderr per stream
    tool_output_chars: int = 16_000  # of one tool result the model reads (the rest: in the workspace)
    network: bool = False  # unrestricted network access from the sandbox
    egress: Policy | None = None  # only the hosts this allowlist names, through the host proxy (`egress`)
    egress_bytes: int = 1024**3  # with an allowlist: bytes both ways, all connections of the sandbox
    egress_connections: int = 10_000  # with an allowlist: connections the sandbox may open

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            try:
                object.__setattr__(self, name, check(getattr(self, name)))
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        if self.network and self.egress is not None:
            raise ValueError(
                "network = true means unrestricted network, and an allowlist (--allow-host, "
                "[sandbox.network] allow) restricts it: give one or the other"
            )


LIMIT_NAMES = tuple(field.name for field in fields(Limits))


def limits_table(limits: Limits) -> dict[str, object]:
    """`limits` as plain data that `parse_limits` reads back (session states, records)."""
    table = asdict(limits)
    table["egress"] = None if limits.egress is None else limits.egress.table()
    return table
FLAG_HELP = f"a sandbox limit, NAME=VALUE (repeatable): {', '.join(LIMIT_NAMES)}"


def parse_limits(values: Mapping[str, object], *, source: str, base: Limits | None = None) -> Limits:
    """`base` (the defaults when None) with `values` by limit name: the one way a job file, a
    flag or a service option becomes `Limits`. A bad name or value is a UsageError that starts
    with `source` and the limit's name ("--limit memory: ..."), one line for each problem."""
    if not isinstance(values, Mapping):
        raise UsageError(f"{source}: expected a table of limits by name, not {_shown(values)}")
    problems: list[str] = []
    checked: dict[str, Any] = {}  # each value of its limit's type: its check made it so
    for name, value in values.items():
        check = _CHECKS.get(name) if isinstance(name, str) else None
        if check is None:
            shown = repr(name)[1:-1] if isinstance(name, str) else repr(name)
            problems.append(f"{source} {shown[:_SHOWN_CHARS]}: not a limit; choose one of: {', '.join(sorted(LIMIT_NAMES))}")
            continue
        try:
            checked[name] = check(value)
        except ValueError as exc:
            problems.append(f"{source} {name}: {exc}")
    if problems:
        raise UsageError("\n".join(problems))
    try:
        return replace(base or Limits(), **checked)
    except ValueError as exc:  # a rule across limits (`Limits.__post_init__`)
        raise UsageError(f"{source}: {exc}") from None


def flag_values(items: Iterable[str]) -> dict[str, str]:
    """The values of `--limit NAME=VALUE` flags by name (a later flag wins)."""
    values = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(f"{FLAG_SOURCE} {_shown(item)}: expected NAME=VALUE, e.g. {FLAG_SOURCE} memory=8G")
        values[name.strip()] = value.strip()
    return values


def limits_from_flags(items: Iterable[str], *, base: Limits | None = None, **short_forms: object) -> Limits:
    """`Limits` from a command's `--limit NAME=VALUE` flags and its short forms (`memory=`,
    `timeout=`, ...: None when not given), which win over `--limit` for the same name."""
    values: dict[str, object] = dict(flag_values(items))
    values.update({name: value for name, value in short_forms.items() if value is not None})
    return parse_limits(values, source=FLAG_SOURCE, base=base)


def with_allowlist(limits: Limits, allow_hosts: Iterable[str], resolves: Iterable[str]) -> Limits:
    """`limits` with `--allow-host` and `--resolve` added to its allowlist (a job's, if any):
    every command that takes those flags ends here."""
    allow_hosts, resolves = list(allow_hosts), list(resolves)
    if not allow_hosts and not resolves:
        return limits
    from ..egress.policy import policy_from_flags

    policy = policy_from_flags(allow_hosts, resolves, base=limits.egress)
    if policy is limits.egress:
        return limits
    return parse_limits({"egress": policy}, source="--allow-host", base=limits)
