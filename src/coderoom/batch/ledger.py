"""DIR/batch.jsonl, the batch's own record: one line when a job starts and one when it ends.

The host writes it, from what the runs returned, never from what a sandbox wrote: no run
folder's content is copied into it, and every field is bounded. `--resume` reads it back as it
would any file in a folder others can write: the file and each line bounded, each line validated
(names as job names, times finite, texts bounded), a malformed line an error naming it; the last
line only, cut short by a kill before its newline, is left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..errors import RecordError

LEDGER_FILE = "batch.jsonl"
MAX_LEDGER_BYTES = 64 * 1024 * 1024
MAX_LINE_BYTES = 64 * 1024
MAX_ERROR_CHARS = 2_000

JobName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]
RunFolder = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")]
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=2**53)]
Status = Literal["ok", "failed", "error", "interrupted"]
NodeId = Annotated[str, Field(pattern=r"^[0-9a-f]{16,128}$")]  # a Ray node's id (hex)
NodeHost = Annotated[str, Field(pattern=r"^[0-9A-Za-z.:-]{1,253}$")]  # its address
MAX_LOST = 16  # attempts lost with their nodes, kept per job (Ray retries far fewer)


class LostOnNode(BaseModel):
    """An attempt whose node was lost mid-job: its partial record is in run_dir."""

    model_config = ConfigDict(extra="forbid", strict=True)

    run_dir: RunFolder
    node: NodeId
    host: NodeHost


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    job: JobName
    digest: Digest
    run_dir: RunFolder
    t: Seconds  # wall-clock time (Unix seconds): starts and ends of jobs compare across them


class JobStarted(_Line):
    event: Literal["start"] = "start"


class JobEnded(_Line):
    event: Literal["end"] = "end"
    status: Status
    duration_s: Seconds
    outputs_ok: Count
    outputs: Count
    tokens: Count
    error: Annotated[str, Field(max_length=MAX_ERROR_CHARS + 100)] | None = None
    signal: Literal["SIGINT", "SIGTERM", "SIGHUP"] | None = None
    node: NodeId | None = None  # `--ray`: the node that ran the job
    host: NodeHost | None = None
    lost: Annotated[list[LostOnNode], Field(max_length=MAX_LOST)] = []


class NodeSaid(BaseModel):
    """What a `--ray` job's node says of its run (`on_node.NodeResult`: its outcome, where it
    ran), checked with the ledger's own types before the driver uses any of it, for the ledger
    and for an MCP client's answer alike: the node is as hostile as its output (R-D1)."""

    model_config = ConfigDict(strict=True)

    status: Status
    duration_s: Seconds
    outputs_ok: Count
    outputs: Count
    tokens: Count
    error: str | None = None
    signal: Literal["SIGINT", "SIGTERM", "SIGHUP"] | None = None
    node: NodeId
    host: NodeHost


_PLACE: TypeAdapter[tuple[str, str]] = TypeAdapter(tuple[NodeId, NodeHost])


def valid_place(node: object, host: object) -> bool:
    """A node's id and address as the ledger writes them (what an attempt says of where it runs)."""
    try:
        _PLACE.validate_python((node, host), strict=True)
    except ValidationError:
        return False
    return True


LedgerLine = Annotated[Union[JobStarted, JobEnded], Field(discriminator="event")]
_LINE: TypeAdapter[JobStarted | JobEnded] = TypeAdapter(LedgerLine)


class Ledger:
    """batch.jsonl open for appending: a line per call, whole, flushed at once (a batch killed
    mid-way keeps every line written before)."""

    def __init__(self, out: Path) -> None:
        self.path = out / LEDGER_FILE
        self._file: IO[str] = self.path.open("a", encoding="ascii")

    def write(self, line: JobStarted | JobEnded) -> None:
        self._file.write(json.dumps(line.model_dump(), ensure_ascii=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_ledger(out: Path) -> list[JobStarted | JobEnded]:
    """The lines of out/batch.jsonl, validated; a `RecordError` naming the line for a bad one."""
    path = out / LEDGER_FILE
    with path.open("rb") as file:
        data = file.read(MAX_LEDGER_BYTES + 1)
    if len(data) > MAX_LEDGER_BYTES:
        raise RecordError(f"{path}: larger than {MAX_LEDGER_BYTES // (1024 * 1024)} MiB; start a new batch folder")
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: empty, or a line a kill cut short
    found: list[JobStarted | JobEnded] = []
    for number, raw in enumerate(lines, start=1):
        if len(raw) > MAX_LINE_BYTES:
            raise RecordError(f"{path} line {number}: longer than {MAX_LINE_BYTES:,} bytes")
        try:
            found.append(_LINE.validate_json(raw))
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "the line"
            raise RecordError(f"{path} line {number}: {where}: {problem['msg']}") from None
    return found


def bounded_error(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_ERROR_CHARS:
        return text
    return text[:MAX_ERROR_CHARS] + f" [... {len(text) - MAX_ERROR_CHARS:,} more characters in the run's record]"
