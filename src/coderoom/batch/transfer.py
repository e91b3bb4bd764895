"""What travels between the driver of a `--ray` batch and the node that runs a job, as bytes
through Ray's object store, bounded both ways.

Out: a job's inputs are files on the driver's disk, which the node has not; they go as one tar
(`pack_inputs`, refused over MAX_INPUT_BYTES before anything is sent) and the node runs the job on
its own copy (`unpack_inputs`). Back: the run folder the node wrote, as one tar of at most
MAX_RUN_FOLDER_BYTES (`pack_run_folder`; over it, its record alone, `pack_record`); the driver
treats it as it treats anything a sandbox produced and extracts it through the exit policy
(`hostile.exits.extract_leaving_out`: regular files and folders only, names checked, bounded in
count and size, no planted repository or hook), what it refused listed in the run folder's note;
a tar cut short is an `ArchiveError`, the job's error. It is an exit like the others.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath

from ..errors import UsageError
from ..hostile.archive import MAX_FILES, ArchiveError, archive, extract_into_sandbox
from ..hostile.exits import extract_leaving_out
from ..hostile.tree import WorkspaceLimitError
from ..jobs import Job
from ..record.names import RECORD_FILE

MAX_INPUT_BYTES = 1024**3  # a job's inputs, sent to its node
MAX_RUN_FOLDER_BYTES = 1024**3  # a run folder, sent back to the driver
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


def pack_run_folder(run_dir: Path) -> bytes:
    """The run folder as a tar; `WorkspaceLimitError` when it is over MAX_RUN_FOLDER_BYTES."""
    with archive(run_dir, skip=set(), max_bytes=MAX_RUN_FOLDER_BYTES) as tar:
        return tar.read()


def pack_record(run_dir: Path) -> bytes:
    """The run folder's record alone, as a tar: what goes back when the whole folder is too large
    (a sandbox can fill its workspace past MAX_RUN_FOLDER_BYTES; what it did must still be known)."""
    skip = {PurePosixPath(path.name) for path in run_dir.iterdir() if path.name != RECORD_FILE}
    with archive(run_dir, skip=skip, max_bytes=MAX_RUN_FOLDER_BYTES) as tar:
        return tar.read()


def unpack_run_folder(data: bytes, run_dir: Path) -> None:
    """A node's run folder into `run_dir` (on the driver), as hostile as a sandbox's output."""
    if len(data) > MAX_RUN_FOLDER_BYTES + MAX_FILES * 1024:  # the tar's headers on top
        raise WorkspaceLimitError(f"a run folder of {len(data):,} bytes came back, over MAX_RUN_FOLDER_BYTES")
    try:
        extract_leaving_out(io.BytesIO(data), run_dir, max_bytes=MAX_RUN_FOLDER_BYTES)
    except (tarfile.TarError, EOFError) as exc:  # cut short or garbled: the job's error, not the batch's
        raise ArchiveError(f"the tar is cut short or malformed ({exc})") from None
