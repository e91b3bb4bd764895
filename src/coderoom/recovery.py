"""Recovery, not deletion: the workspace of a run or a live session whose owner died (kill -9,
an OOM kill, a power loss) is saved into its run folder, and the record ends with a `recovered`
run_end. Every run records its folder in its sandbox as it starts (`lifecycle.RunLifecycle`).

Run by `serve` and `mcp` at start for their own runs folder (`SessionManager`) and by `coderoom
sandbox prune` for every run folder, before anything is removed. The workspace is reopened in a
sandbox by its backend (`sandboxes.orphans`) and saved by `artifacts.save_workspace`, the code a
run's end uses (the archive bounded, output/ through the exit policy).

Where to save comes from a record in the session folder, which only the host writes, but the run
folder it names is still checked before anything is written there (`_open_record`): an absolute
path to a real directory of this user's that nobody else can write, holding a run.jsonl of
this user's (one link, not a link) whose first line is the run_start of that run (its `run_id`)
and whose end is no run_end. A workspace that fails any of this, or whose save fails, is not recovered and
says why; `serve` leaves it in place, `prune` then removes it as before. A workspace its backend
says is gone for good (`WorkspaceLost`: a Docker container that ended after its recovery window,
or cannot be reached; see `sandboxes.docker.bindings`) ends its run at once, `error` naming what
was lost and why, on a restart and in `prune` alike, unless the owner's own save had completed (a
kill while closing): then it is `recovered` with what the run folder holds; a backend that can
let a workspace go unsaved (`Orphan.discard`: Docker's kept container) is not reopened then.
One process at a time recovers a workspace (`sandboxes.recovering`), and no prune removes it, or the
run folder it is saved into, meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .artifacts import OUTPUT_DIR, PARTIAL_SUFFIX, WORKSPACE_ARCHIVE, SaveReport, publish_outputs, save_workspace
from .hostile.names import shown
from .record.events import RECORD_FILE, RECOVERED, Event, ExtractRefused, RunEnd
from .record.writer import encode
from .sandboxes import backend_names, get_backend, recovering
from .sandboxes.base import SandboxBackend
from .sandboxes.orphans import FindsOrphans, Orphan, WorkspaceLost
from .sandboxes.records import trusted_folder
from .sandboxes.spec import SandboxSpec

HEAD_BYTES = 1024**2  # of run.jsonl read for its run_start (the first line, with the job)
TAIL_BYTES = 64 * 1024  # of run.jsonl read for a run_end
MAX_LISTED_SAVED = 1000  # files of a run folder's output/ a recovery lists as saved
CAUSE = "its owner process ended without closing the session (killed: kill -9, an OOM kill or a power loss)"


class NotRecoverable(Exception):
    """Why a dead owner's workspace is not saved into the run folder it names."""


@dataclass
class Recovery:
    """What became of one dead owner's workspace: saved (`saved` names what) or `problem`."""

    where: Path
    run_dir: Path
    saved: list[str] = field(default_factory=list)
    problem: str | None = None
    lost: bool = False  # the workspace is gone for good (WorkspaceLost): the run ended saying so

    def describe(self) -> str:
        if self.lost:
            return f"lost {shown(self.where, 200)} (run folder {shown(self.run_dir, 300)}, ended 'error'): {shown(self.problem or '', 400)}"
        if self.problem is None:
            return f"recovered {shown(self.where, 200)} into {shown(self.run_dir, 300)} ({', '.join(self.saved) or 'nothing saved'})"
        return f"not recovered {shown(self.where, 200)} (run folder {shown(self.run_dir, 300)}): {shown(self.problem, 300)}"


async def recover(
    spec: SandboxSpec, runs_dir: Path | None = None, *, remove_unsaved: bool = False,
    backend: SandboxBackend | None = None,
) -> list[Recovery]:
    """Recover every dead owner's workspace, on each backend that runs here (or only `backend`,
    one handed in: a test's fake), whose run folder is directly in `runs_dir` (None: any).
    `spec`'s limits (the caller's, never a record's) bound the sandbox and the archive. A
    workspace not saved is left in place unless `remove_unsaved`."""
    where = runs_dir.resolve() if runs_dir is not None else None
    done = []
    for backend in [backend] if backend is not None else [get_backend(name) for name in backend_names()]:
        own = SandboxSpec(backend=backend.name, limits=spec.limits)
        if not isinstance(backend, FindsOrphans):
            continue
        found = [orphan for orphan in backend.abandoned_runs(own) if where is None or orphan.run_dir.parent == where]
        if not found or backend.unavailable_reason(own) is not None:  # asked only when needed: a ping
            continue
        for orphan in found:
            done.append(await _recover(orphan, spec.limits.workspace_size, remove_unsaved))
    return done


async def _recover(orphan: Orphan, limit: int, remove_unsaved: bool) -> Recovery:
    try:
        with recovering.all_held([orphan.where, orphan.run_dir]) as mine:  # the run folder: see `cluster.node_folders`
            if not mine:  # left to the process that holds it: nothing is ended or removed here
                return Recovery(orphan.where, orphan.run_dir, problem=recovering.BUSY)
            return await _recover_held(orphan, limit, remove_unsaved)
    except recovering.CannotTell as exc:  # raised before the block: left as if another process held it
        return Recovery(orphan.where, orphan.run_dir, problem=str(exc))


async def _recover_held(orphan: Orphan, limit: int, remove_unsaved: bool) -> Recovery:
    outcome = Recovery(orphan.where, orphan.run_dir)
    try:
        record = _open_record(orphan.run_dir, orphan.owner)
    except NotRecoverable as exc:
        outcome.problem = str(exc)
        return outcome
    try:
        report = SaveReport()
        try:
            if orphan.discard is not None and _saved_before(orphan.run_dir, report, limit):
                await orphan.discard()  # the owner's own save had finished: nothing to save again
            else:
                async with orphan.reopen(remove_on_failure=remove_unsaved) as session:
                    await save_workspace(session, orphan.run_dir, limit, into=report)
                    if WORKSPACE_ARCHIVE not in report.saved:
                        raise NotRecoverable(report.refused.get(WORKSPACE_ARCHIVE) or report.incomplete or "not archived")
        except NotRecoverable as exc:
            outcome.problem = f"the workspace was not saved: {exc}"
        except WorkspaceLost as exc:
            if _saved_before(orphan.run_dir, report, limit):  # killed after its save: nothing was lost
                outcome.problem = None
            else:
                outcome.problem, outcome.lost = f"the workspace was lost: {exc}", True
        except Exception as exc:  # noqa: BLE001 - this workspace's failure alone, said in its outcome
            outcome.problem = f"the workspace was not saved: {type(exc).__name__}: {exc}"
        outcome.saved = list(report.saved)
        if outcome.problem is None or outcome.lost or remove_unsaved:  # else it stays unfinished, to retry later
            _end_record(record, report, outcome.problem)
    finally:
        os.close(record)
    return outcome


def _open_record(run_dir: Path, owner: str) -> int:
    """run.jsonl of `run_dir`, opened to append, once checked as the module docstring says."""
    if not run_dir.is_absolute():
        raise NotRecoverable("the run folder recorded is not an absolute path")
    try:
        folder = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise NotRecoverable(f"the run folder cannot be opened ({exc.strerror}; links are not followed)") from None
    try:
        if not trusted_folder(os.fstat(folder)):
            raise NotRecoverable("the run folder is not a folder of this user's that only this user can write")
        try:
            fd = os.open(RECORD_FILE, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        except OSError as exc:
            raise NotRecoverable(f"its {RECORD_FILE} cannot be opened ({exc.strerror})") from None
    finally:
        os.close(folder)
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_nlink == 1
                and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            raise NotRecoverable(f"its {RECORD_FILE} is not a plain file of this user's")
        if not _starts_run(os.pread(fd, HEAD_BYTES, 0).split(b"\n", 1)[0], owner):
            raise NotRecoverable(f"its {RECORD_FILE} starts no run {shown(owner, 60)}: not the run this workspace served")
        tail = os.pread(fd, TAIL_BYTES, max(0, st.st_size - TAIL_BYTES)).rstrip(b"\n").rsplit(b"\n", 1)[-1]
        if _event(tail).get("type") == "run_end":
            raise NotRecoverable("the run has ended already")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _saved_before(run_dir: Path, report: SaveReport, limit: int) -> bool:
    """Whether the owner's own save had archived the workspace before it died (its workspace.tar
    is only ever renamed into place whole): then `report` lists what is in the run folder, output/
    is extracted from that archive if the kill came before it was (it is published whole or not
    at all), and a partial archive left beside it by the kill is removed."""
    with contextlib.suppress(FileNotFoundError):
        partial = run_dir / (WORKSPACE_ARCHIVE + PARTIAL_SUFFIX)
        if stat.S_ISREG(os.lstat(partial).st_mode):
            partial.unlink()
    for staging in run_dir.glob(f".{OUTPUT_DIR}-*{PARTIAL_SUFFIX}"):  # an extraction the kill cut
        if not staging.is_symlink() and staging.is_dir():
            shutil.rmtree(staging, ignore_errors=True)
    try:
        if not stat.S_ISREG(os.lstat(run_dir / WORKSPACE_ARCHIVE).st_mode):
            return False
    except OSError:
        return False
    report.saved.append(WORKSPACE_ARCHIVE)
    output = run_dir / OUTPUT_DIR
    if not output.is_symlink() and not output.exists():
        publish_outputs(run_dir, limit, report)
        return True
    if not output.is_symlink() and output.is_dir():
        for top, dirs, files in os.walk(output):  # links are not followed
            for name in sorted(files):
                if len(report.saved) > MAX_LISTED_SAVED:
                    return True
                report.saved.append(str((Path(top) / name).relative_to(run_dir)))
    return True


def _starts_run(line: bytes, owner: str) -> bool:
    event = _event(line)
    return event.get("type") == "run_start" and event.get("run_id") == owner


def _event(line: bytes) -> dict[str, object]:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _end_record(fd: int, report: SaveReport, problem: str | None) -> None:
    """Append the save's refusals and the run_end: `recovered`, or `error` saying why nothing was
    saved (the workspace is then removed by `prune`)."""
    events: list[Event] = [ExtractRefused(detail=note) for note in report.notes]
    status = RECOVERED if problem is None else "error"
    events.append(RunEnd(status=status, cause=CAUSE, error=problem, saved=report.saved, incomplete=report.incomplete))
    data = "".join(encode(event) for event in events).encode("ascii")
    tail = os.pread(fd, 1, max(0, os.fstat(fd).st_size - 1))
    os.write(fd, data if tail in (b"", b"\n") else b"\n" + data)  # a line cut by the kill stays its own
    os.fsync(fd)
