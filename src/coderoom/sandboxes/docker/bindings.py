"""Which run folder a Docker sandbox serves, kept on the host: what recovery saves (or names lost)
when its owner died.

A bound session's container outlives a lost owner by a bounded window (`recovery_window`: 600 s
unless the host's $CODEROOM_DOCKER_RECOVERY_S says otherwise; never a sandbox's or a record's
word): `bind` tells its init.py ("keep"), which then, when the host's attach connection drops,
kills every other process and waits that long before it exits (and the engine removes the
container, AutoRemove). Within it, `abandoned_runs`' `reopen` (`rescue.reopen`) saves the
workspace by a `docker exec` of the archiver and removes the container; a container that is
gone or cannot be reached by then is named lost (`WorkspaceLost`, saying why), never left
"unfinished". A session with no run bound keeps the old behaviour: init.py exits at once.

A binding is a folder of ours in the temp dir (`coderoom-docker-<session>-*`, mode 0700), with a
lease (`sandboxes.leases`: the owner's pid, start time, boot id) and a `run` record (the run folder
and run id, the container's id and workspace root), both through `records`. The session removes
it when it closes; one whose owner is gone is what `abandoned_runs` reports (then it is removed).
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

from ...hostile import tree
from .. import pruning, records
from ..leases import read_lease, write_lease
from ..limits import Limits
from ..orphans import Orphan, WorkspaceLost

PREFIX = "coderoom-docker-"
RECOVERY_WINDOW_S = 600.0  # as long as a local leaseless folder waits
WINDOW_ENV = "CODEROOM_DOCKER_RECOVERY_S"  # the host's setting (seconds, 1 to 3600)


def recovery_window() -> float:
    """How long a bound container outlives a lost owner: RECOVERY_WINDOW_S, or the host's
    $CODEROOM_DOCKER_RECOVERY_S (whole seconds, 1 to 3600; anything else is ignored)."""
    value = os.environ.get(WINDOW_ENV, "")
    return float(value) if value.isdigit() and 1 <= int(value) <= 3600 else RECOVERY_WINDOW_S


def bind(folder: Path | None, container: str, run_dir: Path, owner: str, root: str) -> Path:
    """Record that `container` (its id, workspace at `root`) serves run folder `run_dir`
    (absolute) of run `owner`, in `folder` (None: a new binding folder, leased to this
    process); the folder."""
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{container[:12]}-"))
        try:
            write_lease(folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    records.bind_run(folder, run_dir, owner, container=container, root=root)
    return folder


def of_container(container_id: str) -> list[Path]:
    """The binding folders whose `run` record names `container_id` (read as every binding is,
    with `records`' bounds and trust checks). The record, not the folder's name (which `bind`
    starts with the id's first 12 characters only for a person reading the temp dir), says
    which container a binding is of: a renamed or differently named folder is still found, and
    one whose name merely starts alike is not taken."""
    found = []
    for folder in sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}*")):
        bound = records.bound_run(folder, "container")
        if bound is not None and bound[2]["container"] == container_id:
            found.append(folder)
    return found


def unbind(folder: Path | None) -> None:
    """The sandbox closed (or its loss was recorded): its binding goes."""
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def abandoned_runs(limits: Limits) -> list[Orphan]:
    """Every binding whose owner is gone, as an Orphan whose `reopen` saves its container's
    workspace within `limits` (the caller's) or names it lost (`rescue.reopen`), and removes
    the binding either way once done."""
    found = []
    for folder in sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}*")):
        owner = read_lease(folder)
        bound = _bound(folder)
        if owner is None or owner.alive() or bound is None:
            continue
        run_dir, run_id, container, root = bound
        reopen, discard = partial(_reopen, folder, container, root, limits), partial(_discard, folder, container)
        found.append(Orphan(folder, run_dir, run_id, reopen, discard))
    return found


def prune(skipped: list[str] | None = None) -> int:
    """Remove the bindings whose owner is gone (after recovery has named their loss), but for
    one another process is recovering now; how many. The step and its "left in place" line in
    `skipped` are `pruning.remove_held`'s, as for the other backends' folders (attack R-F13)."""
    return sum(
        pruning.remove_held(folder, tree.remove_tree, skipped, candidate=_abandoned)
        for folder in sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}*"))
    )


def _abandoned(folder: Path) -> bool:
    """A binding folder of ours whose owner is gone."""
    owner = read_lease(folder)
    return owner is not None and not owner.alive() and records.trusted_folder(os.lstat(folder))


def _bound(folder: Path) -> tuple[Path, str, str, str] | None:
    bound = records.bound_run(folder, "container", "root")
    if bound is None or not bound[2]["root"].startswith("/"):
        return None
    return bound[0], bound[1], bound[2]["container"], bound[2]["root"]


async def _discard(folder: Path, container: str) -> None:
    """`Orphan.discard`: the owner's own save had finished; its container and binding go."""
    from .rescue import remove

    await remove(container)
    unbind(folder)


@asynccontextmanager
async def _reopen(
    folder: Path, container: str, root: str, limits: Limits, *, remove_on_failure: bool
) -> AsyncIterator[Any]:
    """`rescue.reopen`; the binding goes once its container has (saved and removed, or lost;
    after a failed save only with `remove_on_failure`: else a later recovery tries again)."""
    from .rescue import reopen

    try:
        async with reopen(container, root, limits, remove_on_failure=remove_on_failure) as workspace:
            yield workspace
    except WorkspaceLost:
        unbind(folder)
        raise
    except BaseException:
        if remove_on_failure:
            unbind(folder)
        raise
    unbind(folder)
