"""The allowlist as data: `Rule`, `Secret` and `Policy`, which `policy` makes from what the user
wrote. Plain frozen dataclasses with no parsing, so `sandboxes.limits` can name them without
loading the parser (ipaddress and the rest) on the fast path of a sandbox without an allowlist."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_PORTS = (443, 80)  # a rule without a port: HTTPS and plain HTTP


@dataclass(frozen=True)
class Rule:
    """One allowlist entry: an exact host or `*.suffix` (its subdomains, not itself), on one
    port or on DEFAULT_PORTS."""

    host: str
    port: int | None = None
    wildcard: bool = False

    def matches(self, host: str, port: int) -> bool:
        if port != self.port if self.port is not None else port not in DEFAULT_PORTS:
            return False
        return host.endswith("." + self.host) if self.wildcard else host == self.host

    def ports(self) -> tuple[int, ...]:
        return DEFAULT_PORTS if self.port is None else (self.port,)

    def __str__(self) -> str:
        host = f"*.{self.host}" if self.wildcard else self.host
        return host if self.port is None else f"{host}:{self.port}"


@dataclass(frozen=True)
class Secret:
    """A header the proxy adds for `host`: `format` with the value of the host's environment
    variable `env` (read by the proxy when it sends; never given to the sandbox). Only inside
    HTTPS unless `plain_http`: the sandbox picks the scheme, and plain HTTP would carry the
    secret in clear text past every network on the way."""

    host: str
    header: str
    env: str
    format: str = "{}"
    plain_http: bool = False

    def value(self, environ: Mapping[str, str]) -> str | None:
        raw = environ.get(self.env)
        return None if raw is None else self.format.replace("{}", raw)


@dataclass(frozen=True)
class Policy:
    """An allowlist: every connection the sandbox makes goes to a host a rule matches."""

    allow: tuple[Rule, ...]
    resolve: tuple[tuple[str, str], ...] = ()  # (name, address) the user mapped
    secrets: tuple[Secret, ...] = field(default=())

    def rule_for(self, host: str, port: int) -> Rule | None:
        return next((rule for rule in self.allow if rule.matches(host, port)), None)

    def address_for(self, host: str) -> str | None:
        return dict(self.resolve).get(host)

    def secret_for(self, host: str) -> Secret | None:
        return next((secret for secret in self.secrets if secret.host == host), None)

    def table(self) -> dict[str, object]:
        """The job-file form, which `parse_policy` reads back (records, session states)."""
        return {
            "allow": [str(rule) for rule in self.allow],
            "resolve": dict(self.resolve),
            "secrets": [
                {"host": s.host, "header": s.header, "env": s.env, "format": s.format, "plain_http": s.plain_http}
                for s in self.secrets
            ],
        }
