"""Checks of required outputs by file type, never parsed in the coderoom process.

An output was written by code the model wrote, so decoding it is an attack surface: a PNG of a
few KB can declare 30000x30000 pixels and a CSV can be gigabytes. The parsing is therefore done
by `coderoom.inside.check_outputs`, a small standard-library program that streams each file
with bounds (pixel count before any decompression, bounded lines, a JSON size limit), in one
of two places:

* during a run, inside the sandbox that made the files (`check_in_session`, for the nudge):
  the sandbox's own limits bound it, and no output byte crosses to the host;
* after extraction, on the host (`check_on_host`): a child process that puts RLIMIT_AS and
  RLIMIT_CPU on itself before it opens a file, under a wall-clock timeout. The files are on
  the host by then and the session is gone, so the check cannot be inside; a child keeps a
  failure or a blow-up out of coderoom's memory.

The coderoom process itself only stats files and reads the checker's reply, which is bounded
in size, validated field by field and reduced to plain text, because a sandbox can forge it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import as_file, files
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError

from .jobs import OutputSpec

CHECKER = "check_outputs.py"
HOST_MEMORY = 1024**3  # RLIMIT_AS of the host-side checker
HOST_CPU_S = 120  # RLIMIT_CPU of the host-side checker
HOST_TIMEOUT_S = 300.0
MAX_DETAIL = 300
_PLAIN = re.compile(rf"[A-Za-z0-9 .,:;?!()'\"_/=+%#*<>-]{{1,{MAX_DETAIL}}}")


@dataclass
class OutputCheck:
    path: str
    ok: bool
    detail: str
    size: int | None = None


class _Verdict(BaseModel):
    """One entry of the checker's reply: data from wherever the checker ran."""

    model_config = ConfigDict(extra="forbid")
    ok: StrictBool
    detail: str = Field(max_length=MAX_DETAIL)
    size: int | None = Field(ge=0)


_REPLY = TypeAdapter(list[_Verdict])


def checker_source() -> bytes:
    """The checker program, as shipped in the package (sent into sandboxes)."""
    return files("coderoom.inside").joinpath(CHECKER).read_bytes()


def checker_args(outputs: Sequence[OutputSpec]) -> str:
    return json.dumps([[spec.path, spec.allow_empty] for spec in outputs])


def max_reply(outputs: Sequence[OutputSpec]) -> int:
    return 1024 + (MAX_DETAIL + 64) * len(outputs)


def parse_reply(outputs: Sequence[OutputSpec], reply: bytes, failure: str | None = None) -> list[OutputCheck]:
    """The checks from the checker's stdout; any reply that is not exactly well-formed fails every
    output with `failure` or a reason. Details that are not plain text are withheld."""
    verdicts: list[_Verdict] | None = None
    if failure is None and len(reply) > max_reply(outputs):
        failure = f"not checked: the checker's reply is over {max_reply(outputs)} bytes"
    if failure is None:
        try:
            verdicts = _REPLY.validate_json(reply)
        except ValidationError:
            failure = "not checked: the checker's reply is malformed"
    if verdicts is None or len(verdicts) != len(outputs):
        reason = failure or "not checked: the checker's reply does not match the outputs"
        return [OutputCheck(spec.path, False, reason) for spec in outputs]
    withheld = "(detail withheld: not plain text)"
    return [
        OutputCheck(spec.path, v.ok, v.detail if _PLAIN.fullmatch(v.detail) else withheld, v.size)
        for spec, v in zip(outputs, verdicts)
    ]


def check_on_host(root: Path, outputs: Sequence[OutputSpec]) -> list[OutputCheck]:
    """Check the outputs under `root` on the host, in a child process under rlimits."""
    if not outputs:
        return []
    limits = ["--memory", str(HOST_MEMORY), "--cpu", str(HOST_CPU_S)]
    with as_file(files("coderoom.inside").joinpath(CHECKER)) as program:
        try:
            done = subprocess.run(
                [sys.executable, "-I", str(program), *limits, checker_args(outputs)],
                cwd=root,
                env={"LC_ALL": "C.UTF-8"},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=HOST_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return parse_reply(outputs, b"", f"not checked: over the {HOST_TIMEOUT_S:g} s check time limit")
    failure = None
    if done.returncode != 0:
        failure = (
            f"not checked: the checker stopped (exit {done.returncode}) within its limits of "
            f"{HOST_MEMORY // 1024**2} MiB memory and {HOST_CPU_S} s CPU"
        )
    return parse_reply(outputs, done.stdout, failure)
