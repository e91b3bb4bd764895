"""What goes from the driver of a `--ray` batch to the node that runs a job, as bytes through
Ray's object store, bounded: a job's inputs are files on the driver's disk, which the node has
not; they go as one tar (`pack_inputs`, refused over MAX_INPUT_BYTES before anything is sent) and
the node runs the job on its own copy (`unpack_inputs`). The run folder's way back is shared with
live sessions on a cluster: `cluster.transfer`.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from ..errors import UsageError
from ..hostile.archive import extract_into_sandbox
from ..jobs import Job

MAX_INPUT_BYTES = 1024**3  # a job's inputs, sent to its node
INPUTS_FOLDER = "inputs"


def pack_inputs(job: Job) -> bytes:
    """The job's inputs as one tar, the i-th input (a file or a folder) under the name `i`."""
    sizes = sum(_size(path) for path in job.inputs.values())
    if sizes > MAX_INPUT_BYTES:
        raise UsageError(
            f"job {job.name}: its inputs are {sizes:,} bytes, over the {MAX_INPUT_BYTES:,} (MAX_INPUT_BYTES) "
            "a job sends to a cluster node; put them on storage the nodes share"
        )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for index, host in enumerate(job.inputs.values()):
            tar.add(host, arcname=str(index), recursive=True)
    return buffer.getvalue()


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return path.stat().st_size


def unpack_inputs(job: Job, data: bytes, folder: Path) -> dict[str, Path]:
    """The job's inputs read from `data` into `folder` (on the node): where each now is. The
    user's own files, on their way into a sandbox: no exit, so no exit policy."""
    where = folder / INPUTS_FOLDER
    extract_into_sandbox(io.BytesIO(data), where, max_bytes=MAX_INPUT_BYTES)
    return {workspace: where / str(index) for index, workspace in enumerate(job.inputs)}
