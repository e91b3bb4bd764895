"""Workspaces whose owner died: what a backend reports of one so `coderoom.recovery` can save it.

Why a backend-neutral shape: recovery (the run folder's verification, the save through
`artifacts`, the record's run_end) is the same for every backend; only finding a dead owner's
workspace and reopening it in a sandbox are the backend's. Everything here comes from records
the host wrote (see `records`), and `run_dir` is still only a claim: recovery verifies it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Orphan:
    """One dead owner's workspace: where it is, which run folder and live session it claims to
    serve, and how to reopen it in a sandbox: `reopen(remove_on_failure=...)` is a block giving
    an SDK session on the same files, closed at its end and deleted unless the block failed
    (then only with `remove_on_failure`)."""

    where: Path
    run_dir: Path
    owner: str
    reopen: Callable[..., AbstractAsyncContextManager[Any]]


def record_run(session: Any, run_dir: Path, owner: str) -> None:
    """Tell a started SDK session's backend which run folder (absolute) and live session `owner`
    it serves, so its workspace can be recovered if this process dies (local only so far: a
    backend without `bind_run` keeps no such record). A disk that refuses it costs only that."""
    bind = getattr(getattr(session, "_inner", session), "bind_run", None)
    if bind is not None:
        try:
            bind(run_dir.resolve(), owner)
        except OSError:
            pass
