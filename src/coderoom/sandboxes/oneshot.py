"""Run one command in a fresh sandbox of any backend: `coderoom sandbox run`.

It goes through the SDK-free core (`backend.start(spec)`, see `core`), so it never imports the
Agents SDK. How a backend reports why a command ended: see `base.EXIT_TIMEOUT` and
`base.EXIT_KILLED`.

With `workspace`, the directory's files are copied in (`hydrate`, so symlinks and special files
in it are not) and the workspace is copied back out afterwards through the exit policy
(`hostile.exits.extract_leaving_out`: regular files and directories only; files deleted inside
are not deleted outside). What the sandbox wrote is hostile: VCS metadata, planted repositories
and hooks (`.git/`, `.envrc`, shell start-up files...) are not copied back unless
`copy_back_all`; what was left out is listed in the report and in DIR/coderoom-left-out.txt.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import SandboxUnavailable
from ..interrupts import finish_uncancelled
from .base import EXIT_TIMEOUT
from .registry import get_backend

if TYPE_CHECKING:  # the archive code (tarfile) loads only with a workspace; the spec may be plain
    from collections.abc import Awaitable, Callable

    from ..hostile.archive import ExtractReport
    from .core import Sandbox
    from .spec import SandboxSpec


@dataclass
class OneShotResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    copied_out: ExtractReport | None = None
    egress_refused: list[str] = field(default_factory=list)  # with an allowlist: what the proxy refused or cut

    @property
    def timed_out(self) -> bool:
        return self.exit_code == EXIT_TIMEOUT


async def run_once(
    spec: SandboxSpec,
    argv: list[str],
    workspace: Path | None,
    *,
    copy_back_all: bool = False,
    start: Callable[[], Awaitable[Sandbox]] | None = None,
) -> OneShotResult:
    """Run `argv` (no shell) in a new sandbox with `spec`; copy `workspace` in and back out.
    `start`: the sandbox is already on its way (a backend's `prestart(spec).finish`)."""
    backend = get_backend(spec.backend)
    reason = backend.unavailable_reason(spec)
    if reason is not None:
        raise SandboxUnavailable(reason)
    if workspace is not None:
        from ..hostile.archive import archive
        from ..hostile.exits import extract_leaving_out
    limit = spec.limits.workspace_size
    sandbox = await (start() if start is not None else backend.start(spec))
    refused: list[str] = []
    if spec.limits.egress is not None:
        from ..egress.session import ReportsEgress

        if isinstance(sandbox, ReportsEgress):
            sandbox.watch_egress(lambda fields: refused.append(_refusal(fields)) if fields.get("reason") else None)
    try:
        if workspace is not None:
            with await asyncio.to_thread(archive, workspace, skip=set(), max_bytes=limit) as tar:
                await sandbox.hydrate(tar)
        result = await sandbox.exec(argv)
        report = None
        if workspace is not None:
            with await sandbox.archive() as out:
                report = await asyncio.to_thread(
                    extract_leaving_out, out, workspace, max_bytes=limit, everything=copy_back_all
                )
    finally:
        await finish_uncancelled(sandbox.close())  # a signal's cancel never cuts the cleanup short
    return OneShotResult(result.exit_code, result.stdout, result.stderr, report, refused[:MAX_REFUSALS_SHOWN])


MAX_REFUSALS_SHOWN = 20


def _refusal(fields: dict[str, object]) -> str:
    what = "cut" if fields.get("allowed") else "refused"
    return f"egress {fields.get('method')} {fields.get('host')}:{fields.get('port')} {what}: {fields.get('reason')}"
