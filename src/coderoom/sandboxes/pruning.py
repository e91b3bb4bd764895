"""One abandoned folder's removal in a `prune` loop: held against a recovery, removed, or named.

Why one place: the local backend's session folders (`local.host_dir`), the Ray workers' runs
folders (`cluster.node_folders`) and the Docker backend's binding and egress socket folders
(`docker.bindings`, `docker.egress`) are pruned the same way, and the copies had to keep the
same promises by hand: nothing a recovery is saving into now is removed (`recovering`: this
process holds the folder, and whatever else a recovery may hold in it, before it removes
anything), and a folder that cannot be removed, whatever it raises, costs that folder alone:
it is left in place and named in one terminal-safe line, and the loop goes on (issue 19).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..hostile.names import shown
from . import recovering


def remove_held(
    folder: Path,
    remove: Callable[[Path], None],
    skipped: list[str] | None,
    *,
    candidate: Callable[[Path], bool] = lambda folder: True,
    holding: Callable[[Path], list[Path]] = lambda folder: [],
) -> bool:
    """Remove `folder` with `remove` if it is a `candidate` (ours and abandoned; judged first, so
    nothing else is held), while this process holds it and the folders `holding` names in it;
    True when it went. One another process holds is left to that process (False). Whatever the
    judging, holding or removing raises leaves the folder in place, named in `skipped` (False)."""
    try:
        if not candidate(folder):
            return False
        with recovering.all_held([folder, *holding(folder)]) as mine:
            if not mine:  # a recovery is saving into it now: it, or a later prune, removes it
                return False
            remove(folder)
    except Exception as exc:  # noqa: BLE001 - any failure is this folder's alone
        if skipped is not None:
            skipped.append(_left_in_place(folder, exc))
        return False
    return True


def _left_in_place(folder: Path, exc: BaseException) -> str:
    """The line naming a folder a prune could not remove and why (hostile names made safe to print)."""
    return f"{shown(folder, 200)} left in place: {type(exc).__name__}: {shown(exc, 200)}"
