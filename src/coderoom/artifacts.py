"""What a run leaves on the host, shared by `run` and `rerun`: the workspace archive, the outputs
extracted from it, and the checks of the required outputs (in the session and on the host)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agents.sandbox.session.sandbox_session import SandboxSession

from .hostile.archive import safe_extract_tar
from .jobs import OutputSpec
from .outputs import OutputCheck, check_output

WORKSPACE_ARCHIVE = "workspace.tar"
MAX_OUTPUT_READ = 256 * 1024**2


async def check_in_session(session: SandboxSession, outputs: Sequence[OutputSpec]) -> list[OutputCheck]:
    checks = []
    for spec in outputs:
        try:
            data = await session.read_bounded(Path(spec.path), max_bytes=MAX_OUTPUT_READ)
        except Exception:  # missing, a directory, unreadable: all mean "not there"
            data = None
        checks.append(check_output(spec.path, data, allow_empty=spec.allow_empty))
    return checks


def check_on_host(run_dir: Path, outputs: Sequence[OutputSpec]) -> list[OutputCheck]:
    checks = []
    for spec in outputs:
        path = run_dir / spec.path
        data = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        checks.append(check_output(spec.path, data, allow_empty=spec.allow_empty))
    return checks


async def save_workspace(session: SandboxSession, run_dir: Path, limit: int) -> list[str]:
    """Write workspace.tar (bounded) and extract output/ from it. Returns refusal notes."""
    await session.pty_terminate_all()  # a live kernel must not change files while they are archived
    archive = await session.persist_workspace()
    target = run_dir / WORKSPACE_ARCHIVE
    written = 0
    with target.open("wb") as out:
        while chunk := archive.read(1024 * 1024):
            written += len(chunk)
            if written > limit:
                out.close()
                target.unlink()
                return [f"{WORKSPACE_ARCHIVE}: over {limit} bytes, not saved"]
            out.write(chunk)
    report = safe_extract_tar(target, run_dir, members=["output"], max_bytes=limit)
    return [f"{name}: {reason}" for name, reason in report.refused]
