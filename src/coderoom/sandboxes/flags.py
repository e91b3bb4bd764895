"""The one parser of a command's sandbox flags: `--limit NAME=VALUE` and its short forms
(`--memory`, `--timeout`, `--network`, `--pids`), `--allow-host`/`--resolve` (the allowlist) and
`--package` (the declared environment). `run`, `batch`, `serve`, `mcp` and `sandbox run` all make
a `SandboxFlags` from what they were given and read their limits and environment from it, so a
flag means the same, and a bad one gets the same words, whichever command took it.

Limits are read without pydantic (`sandbox run`'s fast path); the environment, which is a
pydantic model (`spec.EnvironmentSpec`), only when asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .limits import Limits, limits_from_flags, with_allowlist

if TYPE_CHECKING:
    from .spec import EnvironmentSpec


@dataclass(frozen=True)
class SandboxFlags:
    """What the flags said; `short_forms` maps a limit's name to its own flag's value (None: not given)."""

    limits_given: Sequence[str] = ()
    short_forms: Mapping[str, object] = field(default_factory=dict)
    allow_hosts: Sequence[str] = ()
    resolves: Sequence[str] = ()
    packages: Sequence[str] = ()

    def limits(self, base: Limits | None = None) -> Limits:
        """`base` (a job's limits, else the defaults) with the flags' limits and allowlist (UsageError)."""
        limits = limits_from_flags(self.limits_given, base=base, **self.short_forms)
        return with_allowlist(limits, self.allow_hosts, self.resolves)

    def environment(self, base: EnvironmentSpec | None = None) -> EnvironmentSpec:
        """`base` (a job's `[sandbox.environment]`, else none) plus the `--package` flags (UsageError)."""
        from .spec import EnvironmentSpec, with_packages

        environment = base if base is not None else EnvironmentSpec()
        return with_packages(environment, list(self.packages)) if self.packages else environment
