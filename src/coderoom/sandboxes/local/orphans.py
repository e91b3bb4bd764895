"""Local session folders whose owner died with a run bound to them (`host_dir.bind_run`), and
reopening one in a sandbox on the same workspace so recovery can save it the way a run does.

The folder is adopted as a resume adopts it (`host_dir.adoptable`: ours, bound to that SDK
session, owner gone), after what still ran in it is killed and its cgroup removed
(`host_dir.quiesce`); the limits are the caller's, never a record's.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from agents.sandbox import Manifest
from agents.sandbox.snapshot import resolve_snapshot

from ..limits import Limits
from ..orphans import Orphan
from . import bwrap, host_dir


def abandoned_runs(limits: Limits) -> list[Orphan]:
    """Every abandoned session folder with a run and an SDK session recorded in it."""
    found = []
    for folder in host_dir.abandoned_folders():
        bound, session_id = host_dir.bound_run(folder), host_dir.bound_session(folder)
        if bound is not None and session_id is not None:
            run_dir, owner = bound
            found.append(Orphan(folder, run_dir, owner, partial(_reopen, folder, uuid.UUID(hex=session_id), limits)))
    return found


@asynccontextmanager
async def _reopen(folder: Path, session_id: uuid.UUID, limits: Limits, *, remove_on_failure: bool) -> AsyncIterator[Any]:
    """The folder's workspace in a started sandbox; removed after the block unless the block
    failed (then only with `remove_on_failure`)."""
    from .session import LocalSandboxClient, LocalSandboxSessionState

    bw, reason = bwrap.probe()
    if bw is None:
        raise RuntimeError(reason or "bubblewrap is unavailable")
    host_dir.quiesce(folder)
    client = LocalSandboxClient(limits, bw)
    state = LocalSandboxSessionState(
        session_id=session_id, manifest=Manifest(), snapshot=resolve_snapshot(None, str(session_id)),
        host_dir=str(folder), limits=limits,
    )
    session = await client.resume(state)
    if state.host_dir != str(folder):  # not adoptable after all: resume made a fresh folder
        await client.delete(session)
        raise RuntimeError("the session folder could not be adopted (changed or taken by another process)")
    failed = False
    try:
        await session.start()
        yield session
    except BaseException:
        failed = True
        raise
    finally:
        try:
            await session.aclose()
        finally:
            if remove_on_failure or not failed:
                await client.delete(session)
