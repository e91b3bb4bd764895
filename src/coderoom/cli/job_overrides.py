"""The flags that change a job's settings (`--model`, `--max-turns`, `--sandbox`, the limits, ...),
applied the same way by `coderoom run` and `coderoom batch`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pydantic (jobs) loads when a command needs it
    from ..jobs import Job


def apply_overrides(job: Job, **overrides: Any) -> Job:
    """`job` with what the command's flags set (a flag not given is None and changes nothing)."""
    from ..jobs import build_job

    data = job.model_dump()
    sandbox = data["sandbox"]
    for key, value in overrides.items():
        if value is None:
            continue
        if key in ("model", "max_turns"):
            data[key] = value
        elif key in ("tool_choice", "max_tokens", "temperature"):
            data["model_settings"][key] = value
        elif key == "backend":
            sandbox["backend"] = value
        elif key == "limits":
            sandbox["limits"] = value
        elif key == "environment":
            sandbox["environment"] = value.model_dump()
    return build_job(data)
