"""What a job asks of its sandbox: which backend, which limits, which extra Python packages
(`[sandbox.environment]`), and that backend's own options.

Backend-specific settings live in a table named for the backend (`[sandbox.docker]` in a job
file, `SandboxSpec(docker={...})` in code), validated by that backend's `options_model`: the
spec itself knows no backend. `[sandbox.network]` (the allowlist: allow, resolve, secrets) is
no backend's: it becomes the `egress` limit, so every surface reads it from `limits`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, field_validator, model_validator

from ..egress.policy import parse_policy
from ..errors import UsageError
from . import requirements
from .defaults import default_backend_name
from .limits import JOB_FILE_SOURCE, NETWORK_SOURCE, Limits, limits_table, parse_limits, parse_size


def _limits(value: object) -> Limits:
    """A `Limits` as it is; a table (a job file's, a serialized session state's) through the one
    parser, whose UsageError pydantic reports at the `limits` key (see `jobs._describe`)."""
    return value if isinstance(value, Limits) else parse_limits(value, source=JOB_FILE_SOURCE)  # type: ignore[arg-type]


# `Limits` as a field of a pydantic model: validated by `parse_limits`, dumped as a plain table.
LimitsField = Annotated[Limits, PlainValidator(_limits), PlainSerializer(limits_table)]


# A build that takes longer, or an environment that grows larger, is refused (named in the error).
BUILD_TIMEOUT_S = 600.0
MAX_ENVIRONMENT_BYTES = 2 * 1024**3
_URL_SCHEMES = ("https://", "http://", "file://")


def _without_credentials(url: str) -> str:
    """`url` unless it holds credentials (user:token@host): the job is written to the run record
    as it is, and a Docker build's arguments show in the image's history. Named without echoing it."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise ValueError(f"{url[:80]!r} is not a URL") from None
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "a package index URL holds credentials (user:token@host), which the run record would keep; "
            "give them to pip in PIP_INDEX_URL or PIP_FIND_LINKS, ~/.netrc or a keyring instead"
        )
    return url


class EnvironmentSpec(BaseModel):
    """`[sandbox.environment]`: Python packages the sandbox needs beyond its runtime's. The
    backend builds them once per content (see `local.packages`) from `index_url`, `find_links`,
    or else pip's own configuration; `requirements` (a file, relative to the job folder) adds its
    lines to `packages`, which after validation holds every requirement, sorted."""

    model_config = ConfigDict(extra="forbid")

    packages: list[str] = Field(default_factory=list)
    requirements: Path | None = None
    index_url: str | None = None
    find_links: list[str] = Field(default_factory=list)
    build_timeout: float = Field(default=BUILD_TIMEOUT_S, gt=0, le=24 * 3600)
    max_size: int = MAX_ENVIRONMENT_BYTES

    @field_validator("max_size", mode="before")
    @classmethod
    def _size(cls, value: object) -> int:
        return parse_size(value)

    @field_validator("index_url")
    @classmethod
    def _index(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(_URL_SCHEMES):
            raise ValueError(f"{value[:80]!r} is not an index URL (https://, http:// or file://)")
        return value if value is None else _without_credentials(value)

    @field_validator("find_links")
    @classmethod
    def _links(cls, value: list[str]) -> list[str]:
        """Each a URL or a folder of wheels that exists (made absolute)."""
        checked = []
        for item in value:
            if item.startswith(_URL_SCHEMES):
                checked.append(_without_credentials(item))
                continue
            folder = Path(item).expanduser()
            if not folder.is_dir():
                raise ValueError(f"{item[:200]!r} is neither a URL nor a folder that exists")
            checked.append(str(folder.resolve()))
        return checked

    @field_validator("packages")
    @classmethod
    def _plain(cls, value: list[str]) -> list[str]:
        return requirements.normalize(value)

    @model_validator(mode="after")
    def _all_packages(self) -> EnvironmentSpec:
        if self.requirements is not None:
            self.requirements = self.requirements.expanduser().absolute()
            self.packages = requirements.normalize([*self.packages, *requirements.read_file(self.requirements)])
        return self

    @property
    def declared(self) -> bool:
        return bool(self.packages)


def with_packages(environment: EnvironmentSpec, packages: list[str]) -> EnvironmentSpec:
    """`environment` plus the packages of `--package` flags, checked by the same rule (a bad one
    is a UsageError that names the flag and the package)."""
    try:
        added = requirements.normalize(packages)
    except ValueError as exc:
        raise UsageError(f"{requirements.PACKAGE_FLAG}: {exc}") from None
    return environment.model_copy(update={"packages": requirements.normalize([*environment.packages, *added])})


class SandboxSpec(BaseModel):
    """The sandbox of one job. Every backend reads the same spec."""

    model_config = ConfigDict(extra="allow")  # backend tables, checked by `jobs` and the backend

    backend: str = Field(default_factory=default_backend_name)
    limits: LimitsField = Field(default_factory=Limits)
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)

    @model_validator(mode="before")
    @classmethod
    def _network_table(cls, data: Any) -> Any:
        """`[sandbox.network]` into `limits.egress` (a UsageError naming the table if it is bad)."""
        if not isinstance(data, Mapping) or "network" not in data:
            return data
        data = dict(data)
        policy = parse_policy(data.pop("network"), source=NETWORK_SOURCE)
        limits = data.get("limits", {})
        if isinstance(limits, Limits):
            data["limits"] = parse_limits({"egress": policy}, source=NETWORK_SOURCE, base=limits)
        elif isinstance(limits, Mapping):
            data["limits"] = {**limits, "egress": policy}
        return data

    def options_for(self, backend: str) -> dict[str, Any]:
        """The raw `[sandbox.<backend>]` table (empty when the job has none)."""
        value = (self.model_extra or {}).get(backend, {})
        return value.model_dump() if isinstance(value, BaseModel) else dict(value)
