"""A run folder's way back from the cluster node that wrote it (a `--ray` batch's job, a live
session on a node) to the driver, as one tar through Ray's object store, bounded both ways.

The node packs it (`pack_run_folder`: at most MAX_RUN_FOLDER_BYTES; over it, `pack_back` sends
its record alone, so what the code did is still known); the driver treats it as it treats anything
a sandbox produced and extracts it through the exit policy (`unpack_run_folder`, by
`hostile.exits.extract_leaving_out`: regular files and folders only, names checked, bounded in
count and size, no planted repository or hook), what it refused listed in the run folder's note
with what the node's own exit had left out;
a tar cut short is an `ArchiveError`. It is an exit like the others.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath

from ..hostile.archive import MAX_FILES, ArchiveError, archive
from ..hostile.exits import LEFT_OUT_NOTE, extract_leaving_out, write_note
from ..hostile.tree import WorkspaceLimitError
from ..record.names import RECORD_FILE

MAX_RUN_FOLDER_BYTES = 1024**3  # a run folder, sent back to the driver
MAX_NOTE_BYTES = 256 * 1024  # of the node's LEFT_OUT_NOTE, read into the driver's
MAX_NOTE_LINES = 1000


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
        report = extract_leaving_out(io.BytesIO(data), run_dir, max_bytes=MAX_RUN_FOLDER_BYTES, note=False)
        said = _node_note(data)
    except (tarfile.TarError, EOFError) as exc:  # cut short or garbled: the job's error, not the batch's
        raise ArchiveError(f"the tar is cut short or malformed ({exc})") from None
    refused = said + [(name, reason) for name, reason in report.refused if name != LEFT_OUT_NOTE]
    if refused:
        write_note(run_dir, refused)


def _node_note(data: bytes) -> list[tuple[str, str]]:
    """What the node's own exit left out (its LEFT_OUT_NOTE, which the driver's exit refuses as
    a name coderoom writes): kept in the driver's note, or a repository the node's exit kept in
    would go unmentioned. Read as hostile text: a regular file of at most MAX_NOTE_BYTES, at most
    MAX_NOTE_LINES lines of `name: reason`, each said to be the node's (escaped when written)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            if member.name.lstrip("./") == LEFT_OUT_NOTE and member.isreg() and member.size <= MAX_NOTE_BYTES:
                found = tar.extractfile(member)
                text = found.read(MAX_NOTE_BYTES).decode("utf-8", "replace") if found is not None else ""
                lines = [line.partition(": ") for line in text.splitlines()[1 : MAX_NOTE_LINES + 1]]
                return [(name, f"{reason} (on its node)") for name, sep, reason in lines if sep]
    return []


def pack_back(run_dir: Path) -> tuple[bytes | None, str | None]:
    """What a node sends back of `run_dir`: the whole folder, or over MAX_RUN_FOLDER_BYTES its
    record alone (None when even that is over), with the sentence that says what was kept."""
    try:
        return pack_run_folder(run_dir), None
    except WorkspaceLimitError:
        try:
            folder: bytes | None = pack_record(run_dir)
            kept = "only its record was kept"
        except (WorkspaceLimitError, OSError):
            folder, kept = None, "it was not kept"
    return folder, (
        f"the run folder is over {MAX_RUN_FOLDER_BYTES:,} bytes (MAX_RUN_FOLDER_BYTES), too large to send "
        f"back from its node; {kept}"
    )
