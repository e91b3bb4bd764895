"""Workspaces whose owner died: what a backend reports of one so `coderoom.recovery` can save it.

Why a backend-neutral shape: recovery (the run folder's verification, the save through
`artifacts`, the record's run_end) is the same for every backend; only finding a dead owner's
workspace and reopening it in a sandbox are the backend's. Everything here comes from records
the host wrote (see `records`), and `run_dir` is still only a claim: recovery verifies it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

from .sdk_session_adapter import backend_session

if TYPE_CHECKING:
    from .spec import SandboxSpec


@dataclass(frozen=True)
class Orphan:
    """One dead owner's workspace: where it is, which run folder and run (`owner`: its
    run_start's run_id) it claims to serve, and how to reopen it in a sandbox: `reopen(remove_on_failure=...)` is a block giving
    an SDK session on the same files, closed at its end and deleted unless the block failed
    (then only with `remove_on_failure`)."""

    where: Path
    run_dir: Path
    owner: str
    reopen: Callable[..., AbstractAsyncContextManager[Any]]
    # when set: how to let the workspace go without reopening it, used when the owner's own save
    # had finished before it died (a kill while closing: recovery keeps what the run folder
    # holds); None: it is reopened and saved again
    discard: Callable[[], Awaitable[None]] | None = None


class WorkspaceLost(Exception):
    """Raised by an Orphan's `reopen` when its workspace is gone for good (a Docker container's
    tmpfs, once its container ended after its recovery window or cannot be reached): what was
    lost and why, for the record's run_end. Final: recovery ends the run at once rather than
    leaving it to retry."""


@runtime_checkable
class FindsOrphans(Protocol):
    """A backend that can find dead owners' workspaces and reopen them to be saved, or name
    their loss (`WorkspaceLost`)."""

    def abandoned_runs(self, spec: SandboxSpec) -> list[Orphan]: ...


@runtime_checkable
class KeepsRunRecord(Protocol):
    """A backend session that records the run folder it serves, for `FindsOrphans`."""

    def bind_run(self, run_dir: Path, owner: str) -> None: ...


def record_run(session: BaseSandboxSession, run_dir: Path, owner: str) -> None:
    """Tell a started SDK session's backend which run folder (absolute) and run `owner` (its
    run_start's run_id) it serves, so its workspace can be recovered if this process dies (a backend session that
    is no `KeepsRunRecord` keeps no such record). A disk that refuses it costs only that."""
    inner = backend_session(session)
    if isinstance(inner, KeepsRunRecord):
        try:
            inner.bind_run(run_dir.resolve(), owner)
        except OSError:
            pass
