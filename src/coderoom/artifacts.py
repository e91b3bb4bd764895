"""What a run leaves on the host, shared by `run` and `rerun`: the workspace archive, the outputs
extracted from it, and the checks of the required outputs (`check_in_session` here, by the
checker program run inside the sandbox; `saved_checks` on the host, through
`coderoom.outputs.check_on_host`'s rlimited child process).

Nothing half-written ever carries a final name. workspace.tar is written as
`.workspace.tar.partial` and renamed when complete; output/ is extracted into a staging folder
and renamed into place. A save cut short (a second signal, `lifecycle.SAVE_TIMEOUT_S`) removes its
partial files and says so in `SaveReport.incomplete`, which run_end records: a run folder holds
either a whole workspace.tar or none, and either the extracted outputs or none. "Whole" is
checked, not assumed: the archive is fsynced, its size on disk compared with what was read, and
the folder fsynced after the rename; a write the disk refuses (full, read-only) is `SaveFailed`,
in `host_disk`'s words, with `incomplete` saying what was not saved.

The outputs leave through the exit policy (`hostile.exits`): a planted `.git/`, repository, hook,
special file or link stays out, and `coderoom-left-out.txt` in the run folder says what and why.

A workspace over its workspace_size limit cannot be archived; then the required outputs alone
are read from the session (each bounded by MAX_OUTPUT_READ) and saved, so the run keeps them.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from agents.sandbox.errors import WorkspaceArchiveReadError
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.types import ExecResult

from .errors import SaveFailed
from .host_disk import sync_folder, write_problem
from .hostile.exits import LEFT_OUT_NOTE, exit_policy, extract_leaving_out
from .interrupts import finish_uncancelled
from .jobs import OutputSpec
from .outputs import OutputCheck, check_on_host, checker_args, checker_source, max_reply, parse_reply
from .sandboxes.sdk_session_adapter import host_helpers

WORKSPACE_ARCHIVE = "workspace.tar"
OUTPUT_DIR = "output"
PARTIAL_SUFFIX = ".partial"
MAX_OUTPUT_READ = 256 * 1024**2
_CHUNK = 1024 * 1024
# one command stats every required output: "link", "none", "dir" or the size in bytes
_STAT_OUTPUTS = (
    'for p; do if [ -L "$p" ]; then echo link; elif [ -d "$p" ]; then echo dir; '
    'elif [ -f "$p" ]; then stat -c %s -- "$p"; else echo none; fi; done'
)


class SaveAborted(Exception):
    """The save was told to stop; its partial files are gone."""


@dataclass
class SaveReport:
    """What `save_workspace` put in the run folder, what it refused and why, and whether it was cut short."""

    saved: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    incomplete: str | None = None

    @property
    def notes(self) -> list[str]:
        return [f"{name}: {reason}" for name, reason in self.refused.items()]


async def check_in_session(session: SandboxSession, outputs: Sequence[OutputSpec]) -> list[OutputCheck]:
    """Check the outputs where they were made, where the model can still fix them.

    A link or an oversized file is named first (extraction would refuse it later); the rest go
    to the checker, which runs inside the sandbox under its limits, so only its short reply
    comes back. Its source is passed on the command line, never through a file the sandbox's
    code could change, and both steps run as host helpers (`_helper_exec`)."""
    if not outputs:
        return []
    kinds = await _output_kinds(session, outputs)
    early: dict[str, OutputCheck] = {}
    for spec in outputs:
        kind = kinds.get(spec.path)
        if kind == "link":
            early[spec.path] = OutputCheck(spec.path, False, "a symlink: an output must be a regular file")
        elif kind is not None and kind.isdigit() and int(kind) > MAX_OUTPUT_READ:
            detail = f"{int(kind):,} bytes, over the {MAX_OUTPUT_READ:,}-byte limit for an output"
            early[spec.path] = OutputCheck(spec.path, False, detail, size=int(kind))
    rest = [spec for spec in outputs if spec.path not in early]
    checked: dict[str, OutputCheck] = {}
    if rest:
        try:
            source = checker_source().decode()
            done = await _helper_exec(session, "python3", "-I", "-c", source, checker_args(rest), reply_bytes=max_reply(rest))
            ran = done.exit_code == 0
        except Exception:  # not started (the pids limit), or past its deadline
            ran = False
        if ran:
            checked = {check.path: check for check in parse_reply(rest, done.stdout, None)}
        else:  # the sandbox cannot run it (over a limit, say): check copies in the rlimited child
            checked = {check.path: check for check in await _check_copies(session, rest)}
    return [early.get(spec.path) or checked[spec.path] for spec in outputs]


async def _check_copies(session: SandboxSession, outputs: Sequence[OutputSpec]) -> list[OutputCheck]:
    """Copy the outputs out (`_copy_out`) and check the copies on the host, in `check_on_host`'s
    child process: never parsed in this one."""
    with tempfile.TemporaryDirectory(prefix="coderoom-check-") as folder:
        await _copy_out(session, outputs, Path(folder))
        return await asyncio.to_thread(check_on_host, Path(folder), outputs)


async def _copy_out(
    session: SandboxSession, outputs: Sequence[OutputSpec], folder: Path
) -> tuple[list[str], dict[str, str]]:
    """Copy each output from the session into `folder` (each bounded by MAX_OUTPUT_READ, written
    O_EXCL|O_NOFOLLOW) unless the exit policy refuses its name; the paths copied, and why the
    others were not."""
    copied: list[str] = []
    refused: dict[str, str] = {}
    policy = exit_policy(())  # no listing here: the declared names alone are judged
    for spec in outputs:
        if (reason := policy.refusal(spec.path)) is not None:
            refused[spec.path] = reason
            continue
        try:
            data = await session.read_bounded(Path(spec.path), max_bytes=MAX_OUTPUT_READ)
        except Exception as exc:  # missing, a directory, unreadable
            refused[spec.path] = f"could not be read: {_cause(exc)}"
            continue
        target = folder / spec.path
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        copied.append(spec.path)
    return copied, refused


async def _output_kinds(session: SandboxSession, outputs: Sequence[OutputSpec]) -> dict[str, str]:
    if not outputs:
        return {}
    paths = [spec.path for spec in outputs]
    try:
        result = await _helper_exec(session, "sh", "-c", _STAT_OUTPUTS, "sh", *paths, reply_bytes=64 * len(paths))
    except Exception:  # no answer: fall back to reading each output
        return {}
    lines = result.stdout.decode(errors="replace").split()
    return dict(zip(paths, lines)) if len(lines) == len(paths) else {}


async def _helper_exec(session: SandboxSession, *argv: str, reply_bytes: int) -> ExecResult:
    """A host helper command where sandbox code cannot signal, trace or stop it, with a deadline:
    docker's `exec_helper` (another uid). Elsewhere an ordinary command, which is that already
    on the local backend (each command has a PID namespace of its own)."""
    helpers = host_helpers(session)
    if helpers is None:
        return await session.exec(*argv, shell=False)
    return await helpers.exec_helper(*argv, reply_bytes=reply_bytes)


def saved_checks(
    run_dir: Path, outputs: Sequence[OutputSpec], refused: dict[str, str] | None = None
) -> list[OutputCheck]:
    """Check the saved outputs (never parsed in this process); one that extraction refused says
    why (`refused`: path -> reason)."""
    checks = check_on_host(run_dir, outputs)
    for check in checks:
        if check.size is None and refused and check.path in refused:
            check.detail = f"not saved: {refused[check.path]}"
    return checks


async def save_workspace(
    session: SandboxSession,
    run_dir: Path,
    limit: int,
    outputs: Sequence[OutputSpec] = (),
    *,
    into: SaveReport | None = None,
) -> SaveReport:
    """Write workspace.tar (bounded by `limit`) and extract output/ from it, atomically.

    Cancelled (a second signal), it stops within one chunk, removes its partial files, sets
    `incomplete` on the report (pass `into` to see it) and re-raises.
    """
    report = into if into is not None else SaveReport()
    try:
        await session.pty_terminate_all()  # a live kernel must not change files while they are archived
        try:
            archive = await session.persist_workspace()
        except WorkspaceArchiveReadError as exc:
            report.refused[WORKSPACE_ARCHIVE] = f"not saved: {_cause(exc)} (workspace_size {limit:,} bytes)"
            await _save_outputs_only(session, run_dir, outputs, report)
            return report
        await _write_in_thread(cast(IO[bytes], archive), run_dir, limit, report)  # the SDK says io.IOBase
    except asyncio.CancelledError:
        report.incomplete = report.incomplete or "interrupted before the workspace was archived: nothing saved"
        raise
    except OSError as exc:  # the host's disk refused a write: say which and what was not saved
        lost = "output/ not extracted (workspace.tar is saved)" if WORKSPACE_ARCHIVE in report.saved else (
            "the workspace was not saved")
        report.incomplete = f"{lost}: {write_problem(exc, run_dir)}"
        raise SaveFailed(f"{lost} into {run_dir}: {write_problem(exc, run_dir)}") from exc
    return report


async def _write_in_thread(archive: IO[bytes], run_dir: Path, limit: int, report: SaveReport) -> None:
    stop = threading.Event()
    work = asyncio.ensure_future(asyncio.to_thread(_write_and_extract, archive, run_dir, limit, stop, report))
    try:
        await asyncio.shield(work)
    except asyncio.CancelledError:
        stop.set()  # the thread stops within one chunk and removes its partial files
        try:
            await finish_uncancelled(work)
        except SaveAborted:
            pass
        raise
    finally:
        archive.close()


def _cause(exc: BaseException) -> str:
    """The innermost reason of an SDK archive error (e.g. "workspace archive over its size limit")."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return str(exc) or type(exc).__name__


def _write_and_extract(archive: IO[bytes], run_dir: Path, limit: int, stop: threading.Event, report: SaveReport) -> None:
    partial = run_dir / (WORKSPACE_ARCHIVE + PARTIAL_SUFFIX)
    written = 0
    try:
        with partial.open("wb") as out:
            while chunk := archive.read(_CHUNK):
                if stop.is_set():
                    raise SaveAborted
                written += len(chunk)
                if written > limit:
                    report.refused[WORKSPACE_ARCHIVE] = f"over the workspace_size limit ({limit:,} bytes), not saved"
                    break
                out.write(chunk)
            if WORKSPACE_ARCHIVE in report.refused:
                return
            out.flush()
            os.fsync(out.fileno())
            if os.fstat(out.fileno()).st_size != written:
                raise OSError(errno.EIO, f"{partial.name} holds fewer bytes than were written")
        os.replace(partial, run_dir / WORKSPACE_ARCHIVE)
        try:
            sync_folder(run_dir)
        except OSError:
            (run_dir / WORKSPACE_ARCHIVE).unlink(missing_ok=True)
            raise
        report.saved.append(WORKSPACE_ARCHIVE)
    except OSError:
        raise  # a refused write, not an interruption: `save_workspace` says what and where
    except BaseException:
        report.incomplete = f"interrupted while writing {WORKSPACE_ARCHIVE}: no archive saved"
        raise
    finally:
        partial.unlink(missing_ok=True)
    if stop.is_set():
        report.incomplete = "interrupted before the outputs were extracted from workspace.tar"
        raise SaveAborted
    publish_outputs(run_dir, limit, report)


def publish_outputs(run_dir: Path, limit: int, report: SaveReport) -> None:
    """Extract output/ from the run folder's workspace.tar through the exit policy and publish it
    whole: the last step of a save, and what recovery does again when its owner was killed
    between the archive's rename into place and this step (then output/ is not there at all)."""
    with _staging(run_dir) as staging:
        extracted = extract_leaving_out(run_dir / WORKSPACE_ARCHIVE, staging, members=[OUTPUT_DIR], max_bytes=limit)
        _publish(staging, run_dir)
    report.saved += extracted.extracted
    report.refused.update(extracted.refused)


async def _save_outputs_only(
    session: SandboxSession, run_dir: Path, outputs: Sequence[OutputSpec], report: SaveReport
) -> None:
    with _staging(run_dir) as staging:
        copied, refused = await _copy_out(session, outputs, staging)
        report.saved += copied
        report.refused.update(refused)
        _publish(staging, run_dir)


@contextmanager
def _staging(run_dir: Path) -> Iterator[Path]:
    """A private folder in the run folder, removed on exit whatever is left in it."""
    path = Path(tempfile.mkdtemp(prefix=f".{OUTPUT_DIR}-", suffix=PARTIAL_SUFFIX, dir=run_dir))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _publish(staging: Path, run_dir: Path) -> None:
    """Move the staged output/ into the run folder in one rename (a fresh run folder has none),
    and the exit policy's list of what it left out beside it."""
    staged = staging / OUTPUT_DIR
    if staged.is_dir():
        os.rename(staged, run_dir / OUTPUT_DIR)
    if (staging / LEFT_OUT_NOTE).is_file():
        os.rename(staging / LEFT_OUT_NOTE, run_dir / LEFT_OUT_NOTE)
