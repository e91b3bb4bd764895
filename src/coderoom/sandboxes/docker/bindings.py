"""Which run folder a Docker sandbox serves, kept on the host: what recovery names when its owner
died and its workspace went with the container.

Why the workspace cannot be recovered: it is a tmpfs inside the container, and the container ends
with its owner: init.py (PID 1) exits when the host's attach connection drops (stdin is attached
once, `StdinOnce`, so no later process can reattach), and the daemon removes the container
(`AutoRemove`, SES-04). A kill -9 of the owner therefore loses the files at once, before any prune
or restart can run. Making it recoverable would mean a container that outlives its owner (no
exit on EOF while a run is bound, a stdin that can be reattached, no auto-remove) with a lifetime
of its own to bound; until then the loss is named: the record ends `error` saying what was lost,
never left "unfinished".

A binding is a folder of ours in the temp dir (`coderoom-docker-<session>-*`, mode 0700), with a
lease (`sandboxes.leases`: the owner's pid, start time, boot id) and a `run` record (the run folder
and run id, the container's name), both through `records`. The session removes it when it closes;
one whose owner is gone is what `abandoned_runs` reports (then it is removed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from ...hostile.names import shown
from .. import records
from ..leases import read_lease, write_lease
from ..orphans import Orphan, WorkspaceLost

PREFIX = "coderoom-docker-"


def bind(folder: Path | None, container: str, run_dir: Path, owner: str) -> Path:
    """Record that `container` (its id) serves run folder `run_dir` (absolute) of run `owner`, in
    `folder` (None: a new binding folder, leased to this process); the folder."""
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{container[:12]}-"))
        try:
            write_lease(folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    records.bind_run(folder, run_dir, owner, container=container)
    return folder


def unbind(folder: Path | None) -> None:
    """The sandbox closed (or its loss was recorded): its binding goes."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def abandoned_runs() -> list[Orphan]:
    """Every binding whose owner is gone, as an Orphan whose `reopen` names the loss."""
    found = []
    for folder in sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}*")):
        owner = read_lease(folder)
        bound = _bound(folder)
        if owner is None or owner.alive() or bound is None:
            continue
        run_dir, run_id, container = bound
        found.append(Orphan(folder, run_dir, run_id, partial(_lost, folder, container)))
    return found


def prune() -> int:
    """Remove the bindings whose owner is gone (after recovery has named their loss); how many."""
    removed = 0
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        owner = read_lease(folder)
        if owner is not None and not owner.alive() and os.lstat(folder).st_uid == os.getuid():
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def _bound(folder: Path) -> tuple[Path, str, str] | None:
    bound = records.bound_run(folder, "container")
    return None if bound is None else (bound[0], bound[1], bound[2]["container"])


@asynccontextmanager
async def _lost(folder: Path, container: str, *, remove_on_failure: bool) -> AsyncIterator[Any]:
    """No session to save from: the loss, named (WorkspaceLost), and the binding removed."""
    unbind(folder)
    raise WorkspaceLost(
        f"it was a tmpfs in Docker container {shown(container[:12], 20)}, which ends with its owner "
        "(its PID 1 exits when the host's connection drops and the engine removes it): none of its files "
        "could be saved; the record up to the kill is kept"
    )
    yield  # an async generator, for asynccontextmanager
