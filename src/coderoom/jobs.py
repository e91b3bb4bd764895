"""The job: what goes into the workspace, what the agent is asked, what must come out.

A job is given either as a folder with `coderoom.toml` or as command-line flags; both end
up as the same validated `Job`. Every validation error names the file and the key.
"""

from __future__ import annotations

import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import JobError, UsageError
from .hostile.names import UnsafePath, safe_relative_path
from .models.options import ModelOptions
from .sandboxes.spec import SandboxSpec

JOB_FILE = "coderoom.toml"

DEFAULT_INSTRUCTIONS = (
    "You are a practical data analyst. Use the sandbox workspace to inspect files, write and run "
    "code when useful, and save clear artifacts. Keep conclusions grounded in computed evidence. "
    "The sandbox has Python with numpy, scipy, pandas, matplotlib, openpyxl (Excel) and pyarrow "
    "(parquet) available."
)


class OutputSpec(BaseModel):
    """One required artifact, by its path in the workspace."""

    model_config = ConfigDict(extra="forbid")

    path: str
    allow_empty: bool = Field(default=False, description="a CSV with a header and no rows is valid")

    @field_validator("path")
    @classmethod
    def _under_output(cls, value: str) -> str:
        rel = _workspace_path(value)
        if rel.parts[0] != "output" or len(rel.parts) < 2:
            raise ValueError(f"{value!r} must be a file under output/ (e.g. output/report.md)")
        return str(rel)


class Job(BaseModel):
    """A validated job. Host paths in `inputs` are absolute and exist."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="job", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    instructions: str = DEFAULT_INSTRUCTIONS
    prompt: str = Field(min_length=1)
    inputs: dict[str, Path] = Field(default_factory=dict)
    outputs: list[OutputSpec] = Field(default_factory=list)
    model: str = Field(default="", description="empty: OpenAI if OPENAI_API_KEY is set, else offline")
    model_settings: ModelOptions = Field(default_factory=ModelOptions)
    max_turns: int = Field(default=25, ge=1, le=500)
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec)

    @model_validator(mode="before")
    @classmethod
    def _model_table(cls, data: Any) -> Any:
        """`[model]` with `spec` and settings, as well as `model = "SPEC"`."""
        if isinstance(data, dict) and isinstance(data.get("model"), dict):
            table = dict(data["model"])
            if "model_settings" in data:
                raise ValueError("give the model settings in [model] or in model_settings, not both")
            data = {**data, "model": table.pop("spec", ""), "model_settings": table}
        return data

    @field_validator("outputs", mode="before")
    @classmethod
    def _paths_as_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [parse_output_flag(item) if isinstance(item, str) else item for item in value]
        return value

    @field_validator("inputs")
    @classmethod
    def _inputs_exist(cls, value: dict[str, Path]) -> dict[str, Path]:
        checked: dict[str, Path] = {}
        for workspace_path, host_path in value.items():
            rel = _workspace_path(workspace_path)
            if rel.parts[0] == "output":
                raise ValueError(f"{workspace_path!r}: inputs may not be placed under output/")
            if not host_path.exists():
                raise ValueError(f"{workspace_path!r}: host file {str(host_path)!r} does not exist")
            if not (host_path.is_file() or host_path.is_dir()):
                raise ValueError(f"{workspace_path!r}: {str(host_path)!r} is not a file or folder")
            checked[str(rel)] = host_path.resolve()
        return checked

    @field_validator("sandbox")
    @classmethod
    def _offered_backend(cls, value: SandboxSpec) -> SandboxSpec:
        """A job names only a backend that isolates (never the unconfined one), and each
        `[sandbox.<backend>]` table is valid for that backend."""
        from .sandboxes.registry import backend_names, get_backend

        offered = backend_names()
        if value.backend not in offered:
            raise ValueError(f"sandbox backend {value.backend!r} is not offered; choose one of: {', '.join(offered)}")
        for name, table in (value.model_extra or {}).items():
            if name not in offered:
                raise ValueError(f"sandbox.{name}: unknown key (tables of backend options: {', '.join(offered)})")
            try:
                get_backend(name).options_model().model_validate(table)
            except ValidationError as exc:
                raise ValueError("; ".join(
                    f"sandbox.{name}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
                )) from None
        return value

    @field_validator("inputs")
    @classmethod
    def _inputs_do_not_clash(cls, value: dict[str, Path]) -> dict[str, Path]:
        """A file at `input` and another at `input/x.csv` cannot both exist in the workspace."""
        for path, host in value.items():
            for other in value:
                if other != path and PurePosixPath(path) in PurePosixPath(other).parents and host.is_file():
                    raise ValueError(f"{path!r} is a file, so {other!r} cannot be placed inside it")
        return value

    @model_validator(mode="after")
    def _distinct_outputs(self) -> Job:
        paths = [output.path for output in self.outputs]
        duplicates = sorted({p for p in paths if paths.count(p) > 1})
        if duplicates:
            raise ValueError(f"outputs listed twice: {', '.join(duplicates)}")
        return self


def _workspace_path(value: str) -> PurePosixPath:
    try:
        return safe_relative_path(value)
    except UnsafePath as exc:
        raise ValueError(f"not a workspace path: {exc}") from None


def _describe(error: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid job"]
    for item in error.errors():
        said = item.get("ctx", {}).get("error")
        if isinstance(said, UsageError):  # already names where it is: `sandboxes.limits.parse_limits`
            lines += [f"  {line}" for line in said.message.splitlines()]
            continue
        loc = ["model", *item["loc"][1:]] if item["loc"][:1] == ("model_settings",) else item["loc"]
        key = ".".join(str(part) for part in loc) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"  {key}: {message}")
    return "\n".join(lines)


def load_job(path: Path) -> Job:
    """Load a job folder (or its coderoom.toml); relative input paths are relative to the folder."""
    data, source = job_data(path)
    return build_job(data, source=source)


def job_data(path: Path) -> tuple[dict[str, Any], str]:
    """A job folder's (or coderoom.toml's) settings as plain data, not yet validated, with input
    paths made absolute, and the file's name for errors: `load_job` validates them as they are;
    a batch manifest adds each row to them first (`batch.manifest`)."""
    job_file = path / JOB_FILE if path.is_dir() else path
    if not job_file.is_file():
        raise JobError(f"{job_file}: no such job file (a job folder holds {JOB_FILE})")
    try:
        data = tomllib.loads(job_file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise JobError(f"{job_file}: not valid TOML: {exc}") from None
    folder = job_file.parent.resolve()
    inputs = data.get("inputs")
    if isinstance(inputs, dict):
        data["inputs"] = {
            key: folder / value if isinstance(value, str) else value for key, value in inputs.items()
        }
    _environment_paths(data, folder)
    data.setdefault("name", _default_name(folder.name))
    return data, str(job_file)


def _environment_paths(data: dict[str, Any], folder: Path) -> None:
    """`[sandbox.environment]`'s `requirements` and `find_links` folders are relative to the job."""
    sandbox = data.get("sandbox")
    environment = sandbox.get("environment") if isinstance(sandbox, dict) else None
    if not isinstance(environment, dict):
        return
    if isinstance(environment.get("requirements"), str):
        environment["requirements"] = str(folder / Path(environment["requirements"]).expanduser())
    links = environment.get("find_links")
    if isinstance(links, str):
        links = [links]
    if isinstance(links, list):
        environment["find_links"] = [
            link if not isinstance(link, str) or "://" in link else str(folder / Path(link).expanduser())
            for link in links
        ]


def build_job(data: dict[str, Any], *, source: str = "command line") -> Job:
    """Validate a job given as plain data (from TOML or from flags)."""
    try:
        return Job.model_validate(data)
    except ValidationError as exc:
        raise JobError(_describe(exc, source)) from None


def parse_input_flag(flag: str) -> tuple[str, Path]:
    """`HOST=WORKSPACE` (as in `--input data/x.csv=input/x.csv`); `HOST` alone goes to input/NAME."""
    host, sep, workspace = flag.partition("=")
    if not host:
        raise JobError(f"--input {flag!r}: expected HOST_PATH=WORKSPACE_PATH")
    host_path = Path(host).expanduser()
    return (workspace if sep else f"input/{host_path.name}"), host_path.absolute()


ALLOW_EMPTY = ":allow-empty"


def parse_output_flag(flag: str) -> dict[str, Any]:
    """`PATH` or `PATH:allow-empty` (as in `--output output/anomalies.csv:allow-empty`): the
    output as a `[[outputs]]` table. The one string form of an output, for flags, run_job and
    `outputs = ["..."]` alike, so each can say that an empty result (a CSV with a header and no
    rows) is a legitimate answer, as `allow_empty = true` does in coderoom.toml."""
    if flag.endswith(ALLOW_EMPTY):
        return {"path": flag[: -len(ALLOW_EMPTY)], "allow_empty": True}
    return {"path": flag}


def with_output_flags(outputs: list[dict[str, Any]], flags: list[str]) -> list[dict[str, Any]]:
    """A job's outputs plus those of `--output` flags; `PATH:allow-empty` for a path the job
    lists already relaxes that output instead of listing it twice."""
    merged = [dict(output) for output in outputs]
    for flag in flags:
        added = parse_output_flag(flag)
        listed = next((o for o in merged if added.get("allow_empty") and o["path"] == added["path"]), None)
        if listed is not None:
            listed["allow_empty"] = True
        else:
            merged.append(added)
    return merged


def _default_name(text: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_.-" else "-" for ch in text).strip("-.")
    return cleaned[:64] or "job"
