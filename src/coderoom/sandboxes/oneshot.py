"""Run one command in a fresh sandbox of any backend: `coderoom sandbox run`.

How a backend reports why a command ended: see `base.EXIT_TIMEOUT` and `base.EXIT_KILLED`.

With `workspace`, the directory's files are copied in (`hydrate_workspace`, so symlinks and
special files in it are not) and the workspace is copied back out afterwards with
`safe_extract_tar` (regular files and directories only; files deleted inside are not deleted
outside).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from ..hostile.archive import ExtractReport, archive, safe_extract_tar
from .base import EXIT_TIMEOUT
from .session import open_session
from .spec import SandboxSpec


@dataclass
class OneShotResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    copied_out: ExtractReport | None = None

    @property
    def timed_out(self) -> bool:
        return self.exit_code == EXIT_TIMEOUT


async def run_once(spec: SandboxSpec, argv: list[str], workspace: Path | None) -> OneShotResult:
    """Run `argv` (no shell) in a new sandbox with `spec`; copy `workspace` in and back out."""
    async with open_session(spec) as session:
        if workspace is not None:
            tar = await asyncio.to_thread(
                archive, workspace, skip=set(), max_bytes=spec.limits.workspace_size
            )
            with tar:
                await session.hydrate_workspace(tar)
        result = await session.exec(*argv, shell=False)
        report = None
        if workspace is not None:
            out = await session.persist_workspace()
            try:
                report = await asyncio.to_thread(
                    safe_extract_tar, out, workspace, max_bytes=spec.limits.workspace_size  # type: ignore[arg-type]
                )
            finally:
                out.close()
    return OneShotResult(result.exit_code, result.stdout, result.stderr, report)
