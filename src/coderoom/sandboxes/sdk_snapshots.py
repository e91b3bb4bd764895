"""The SDK's restore of a snapshot on resume, with the snapshot checked before the live
workspace is cleared.

The SDK's base session clears the workspace and then calls `hydrate_workspace`, so a snapshot
that is then refused leaves the workspace empty; its UnixLocal session checks first (the SDK's
`test_unix_local_resume_rejects_invalid_snapshot_before_clearing_workspace`). Both coderoom
sessions restore this way: `hostile.snapshot.check`, then clear, then write what was checked.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from pathlib import Path
from typing import Protocol

from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

from ..hostile.snapshot import Snapshot, check
from .sdk_errors import snapshot_errors


class RestoresChecked(Protocol):
    async def restore_checked(self, checked: Snapshot) -> None: ...


async def restore_on_resume(session: BaseSandboxSession, core: RestoresChecked, max_bytes: int) -> None:
    """Restore `session`'s snapshot into its workspace through `core`; WorkspaceArchiveWriteError
    (the SDK's, with `reason` and `member`) before anything is cleared if it is refused."""
    root = Path(session.state.manifest.root)
    archive = await session.state.snapshot.restore(dependencies=session.dependencies)
    try:
        with snapshot_errors(root):
            checked = await asyncio.to_thread(check, archive, max_bytes=max_bytes)  # type: ignore[arg-type]
        try:
            await session._clear_workspace_root_on_resume()
            with snapshot_errors(root):
                await core.restore_checked(checked)
        finally:
            checked.close()
    finally:
        with suppress(Exception):
            archive.close()
