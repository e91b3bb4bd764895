"""A session actor's temporary runs folder on its node (`service.on_node.SessionActor`), and a
batch job's (`batch.on_node.run_on_node`: its inputs and run folder), leased to the Ray worker
process that holds it (`sandboxes.leases`), so `coderoom sandbox prune` on that node can tell a
dead worker's folder from a live one's and remove it.

Why a batch job's too: its folder is removed when the job returns, but a forced cancel (an MCP
client's cancel of `run_job --ray`, a stopped `batch --ray`: `ray.cancel(force=True)`) kills
the worker mid-job, and the folder stayed in the node's temp dir for ever (attack R-C5).

Why: the actor removes its folder after a normal close (`SessionActor.remove`), but an actor
whose worker was killed (SIGKILL, an OOM kill, a `ray.kill` of a session that stopped answering)
removes nothing: its folder stayed in the node's temp dir for ever, and a later recovery even
saved the workspace into the run folder in it, where nobody collects it (the driver already has
the record so far, ended 'lost'; attack R-B8, docs/security.md). So `prune` removes these folders
before it recovers anything: the dead actor's sandbox (a local session folder, a Docker container,
leased to the same dead worker) then has no run folder to be saved into, is named "not
recovered" and removed by its backend's prune, as any dead owner's unsaved workspace is.

A live actor's folder (its worker alive, even stopped: SIGSTOP) is never touched, nor one a
recovery is saving into now: `recovery` holds the run folder it saves into (`recovering`), and
this prune holds the folder and every run folder in it before it removes anything.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..hostile import tree
from ..sandboxes import pruning
from ..sandboxes.leases import abandoned, write_lease
from ..sandboxes.records import trusted_folder

PREFIX = "coderoom-session-"  # a session actor's
BATCH_PREFIX = "coderoom-batch-"  # a batch job's


def make(prefix: str = PREFIX) -> Path:
    """A new folder for this process's session actor or batch job (mode 0700), leased to this process."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        write_lease(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


@contextmanager
def leased(prefix: str) -> Iterator[Path]:
    """A folder of `make`, removed when the block ends (a killed process leaves it to `prune`)."""
    folder = make(prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def abandoned_folders() -> list[Path]:
    """The actors' and jobs' folders in this node's temp dir whose owner is gone
    (`leases.abandoned`), ours alone (nobody else can change their entries), oldest name first."""
    found = []
    base = Path(tempfile.gettempdir())
    for folder in sorted([*base.glob(f"{PREFIX}*"), *base.glob(f"{BATCH_PREFIX}*")]):
        try:
            ours = trusted_folder(os.lstat(folder))
        except OSError:
            continue
        if ours and abandoned(folder):
            found.append(folder)
    return found


def prune(skipped: list[str] | None = None) -> int:
    """Remove the folders of dead session actors and batch jobs (see the module's docstring); how many.
    One that cannot be removed is named in `skipped` with why, and the others are still pruned."""
    return sum(pruning.remove_held(folder, tree.remove_tree, skipped, holding=_runs) for folder in abandoned_folders())


def _runs(folder: Path) -> list[Path]:
    """The run folders in an actor's or job's folder: a recovery may be saving into one of them."""
    return [entry for entry in folder.iterdir() if entry.is_dir() and not entry.is_symlink()]
