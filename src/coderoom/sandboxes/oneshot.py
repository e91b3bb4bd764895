"""Run one command in a fresh sandbox of any backend: `coderoom sandbox run`.

Contract with backends (how a backend reports why a command ended, in `ExecResult.exit_code`
of a plain `session.exec(...)` without a caller timeout):

* `EXIT_TIMEOUT` (124, as coreutils `timeout`): the backend killed the command's whole process
  tree at `Limits.timeout`.
* `EXIT_KILLED` (137 = 128 + SIGKILL): the command was SIGKILLed, which is how a cgroup OOM kill
  (docker `--memory`) shows. Backends enforcing memory with RLIMIT_AS (local) make the
  allocation fail instead (MemoryError, exit 1); 137 then means some other SIGKILL.
* anything else: the command's own exit status (128 + N for death by signal N).

With `workspace`, the directory's files are copied in (`hydrate_workspace`, so symlinks and
special files in it are not) and the workspace is copied back out afterwards with
`safe_extract_tar` (regular files and directories only; files deleted inside are not deleted
outside).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from coderoom.outputs import ExtractReport, safe_extract_tar

from ._workspace import archive
from .registry import open_session
from .spec import SandboxSpec

EXIT_TIMEOUT = 124
EXIT_KILLED = 137


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
