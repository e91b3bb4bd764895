"""The jobs of a batch: job folders, or the rows of one manifest file (CSV or JSONL), each row a
prompt, inputs and outputs added to one shared coderoom.toml's settings (`--job-file`).

Everything is validated before anything runs: a bad folder or row is a `JobError` (exit 2)
naming the file, the row and the field, found before the batch's folder exists. A row becomes a
job through the same `jobs.build_job` as a job folder, so a row cannot ask for anything a
coderoom.toml could not.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import JobError
from ..jobs import JOB_FILE, Job, build_job, job_data, load_job, parse_input_flag

MANIFEST_SUFFIXES = (".csv", ".jsonl")
ROW_FIELDS = ("name", "prompt", "inputs", "outputs")
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_ROWS = 10_000
LIST_SEPARATOR = ";"  # between items of a CSV row's inputs and outputs


@dataclass(frozen=True)
class BatchEntry:
    """One job of a batch. `key` (the job's name) is unique in the batch: batch.jsonl and
    `--resume` know the job by it; `source` says where it was defined."""

    key: str
    job: Job
    source: str

    @property
    def digest(self) -> str:
        """The job's settings as a hash: `--resume` skips a job only if it has not changed."""
        settings = json.dumps(self.job.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(settings.encode()).hexdigest()


def is_manifest(path: Path) -> bool:
    return path.suffix.lower() in MANIFEST_SUFFIXES and path.is_file()


def batch_entries(targets: Sequence[Path], job_file: Path | None = None) -> list[BatchEntry]:
    """The batch's jobs from job folders, or from one manifest file (sharing `job_file`'s
    settings); names must be distinct."""
    if not targets:
        raise JobError("give job folders, or one manifest file (.csv or .jsonl)")
    manifests = [t for t in targets if is_manifest(t)]
    if manifests and len(targets) > 1:
        raise JobError(f"{manifests[0]}: a manifest is the batch's only job list; give it alone")
    if manifests:
        entries = list(_manifest_entries(manifests[0], job_file))
        if not entries:
            raise JobError(f"{manifests[0]}: no rows; a row is a job ({', '.join(ROW_FIELDS)})")
    elif job_file is not None:
        raise JobError("--job-file is for a manifest's rows; a job folder has its own coderoom.toml")
    else:
        entries = [_folder_entry(target) for target in targets]
    _check_distinct(entries)
    return entries


def _folder_entry(target: Path) -> BatchEntry:
    if not (target.is_dir() or target.name == JOB_FILE):
        raise JobError(
            f"{target}: neither a job folder (with {JOB_FILE}) nor a manifest ({' or '.join(MANIFEST_SUFFIXES)})"
        )
    job = load_job(target)
    return BatchEntry(job.name, job, str(target))


def _check_distinct(entries: list[BatchEntry]) -> None:
    seen: dict[str, BatchEntry] = {}
    for entry in entries:
        other = seen.setdefault(entry.key, entry)
        if other is not entry:
            raise JobError(
                f"{entry.source}: the job name {entry.key!r} is also {other.source}'s; "
                "each job of a batch needs its own name"
            )


def _manifest_entries(manifest: Path, job_file: Path | None) -> Iterator[BatchEntry]:
    if manifest.stat().st_size > MAX_MANIFEST_BYTES:
        raise JobError(f"{manifest}: larger than {MAX_MANIFEST_BYTES // (1024 * 1024)} MiB")
    try:
        text = manifest.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise JobError(f"{manifest}: not UTF-8 text ({exc.reason})") from None
    if job_file is not None:
        base, _ = job_data(job_file)
    else:
        base = {}
    folder = manifest.parent.resolve()
    rows = _jsonl_rows(manifest, text) if manifest.suffix.lower() == ".jsonl" else _csv_rows(manifest, text)
    for number, row in rows:
        source = f"{manifest} row {number}"
        data = _row_job(base, row, folder, source)
        if not row.get("name"):  # the job file's name (its folder's, by default) and the row's number
            data["name"] = f"{str(base.get('name', 'row'))[:56]}-{number}"
        job = build_job(data, source=source)
        yield BatchEntry(job.name, job, source)


def _csv_rows(manifest: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    unknown = [name for name in reader.fieldnames or [] if name not in ROW_FIELDS]
    if unknown:
        raise JobError(f"{manifest}: unknown column {unknown[0]!r} (the columns: {', '.join(ROW_FIELDS)})")
    for number, row in enumerate(reader, start=1):
        if number > MAX_ROWS:
            raise JobError(f"{manifest}: more than {MAX_ROWS:,} rows")
        if None in row:  # more cells than the header has columns
            raise JobError(f"{manifest} row {number}: more cells than columns")
        yield number, {
            "name": row.get("name") or None,
            "prompt": row.get("prompt") or None,
            "inputs": _split(row.get("inputs")),
            "outputs": _split(row.get("outputs")),
        }


def _split(cell: str | None) -> list[str]:
    return [item.strip() for item in (cell or "").split(LIST_SEPARATOR) if item.strip()]


def _jsonl_rows(manifest: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) > MAX_ROWS:
        raise JobError(f"{manifest}: more than {MAX_ROWS:,} rows")
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise JobError(f"{manifest} row {number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise JobError(f"{manifest} row {number}: a row is a JSON object with {', '.join(ROW_FIELDS)}")
        unknown = [name for name in row if name not in ROW_FIELDS]
        if unknown:
            raise JobError(f"{manifest} row {number}: field {unknown[0]!r}: unknown (the fields: {', '.join(ROW_FIELDS)})")
        yield number, row


def _row_job(base: dict[str, Any], row: dict[str, Any], folder: Path, source: str) -> dict[str, Any]:
    """The shared settings with the row's name, prompt, inputs (HOST paths relative to the
    manifest's folder) and outputs added."""
    data = json.loads(json.dumps(base, default=str))  # a copy per row
    for field in ("name", "prompt"):
        value = row.get(field)
        if value is not None and not isinstance(value, str):
            raise JobError(f"{source}: field {field!r}: expected text")
        if value:
            data[field] = value
    inputs = row.get("inputs") or []
    if isinstance(inputs, dict):
        inputs = [f"{host}={workspace}" for workspace, host in inputs.items()]
    if not isinstance(inputs, list) or not all(isinstance(item, str) for item in inputs):
        raise JobError(f"{source}: field 'inputs': expected HOST=WORKSPACE items (or, in JSONL, an object)")
    data["inputs"] = {**(data.get("inputs") or {}), **dict(_input(item, folder) for item in inputs)}
    outputs = row.get("outputs") or []
    if not isinstance(outputs, list):
        raise JobError(f"{source}: field 'outputs': expected a list of paths under output/")
    data["outputs"] = [*(data.get("outputs") or []), *outputs]
    return data


def _input(item: str, folder: Path) -> tuple[str, Path]:
    host, sep, workspace = item.partition("=")
    host_path = Path(host).expanduser()
    if host and not host_path.is_absolute():
        host_path = folder / host_path
    return parse_input_flag(f"{host_path if host else ''}{sep}{workspace}")
