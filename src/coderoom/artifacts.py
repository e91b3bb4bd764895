"""What a run leaves on the host, shared by `run` and `rerun`: the workspace archive, the outputs
extracted from it, and the checks of the required outputs (`check_in_session` here,
`check_on_host` from `coderoom.outputs`)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from agents.sandbox.session.sandbox_session import SandboxSession

from .hostile.archive import safe_extract_tar
from .jobs import OutputSpec
from .outputs import CHECKER, OutputCheck, check_on_host, checker_args, checker_source, parse_reply

WORKSPACE_ARCHIVE = "workspace.tar"
CHECKER_PATH = f".coderoom/{CHECKER}"


async def check_in_session(session: SandboxSession, outputs: Sequence[OutputSpec]) -> list[OutputCheck]:
    """Check the outputs where they were made: the checker runs inside the sandbox, under its
    limits, and only its short reply comes back. It is written afresh each time, since the
    sandbox's code may have changed the last copy."""
    if not outputs:
        return []
    await session.mkdir(Path(CHECKER_PATH).parent, parents=True)
    await session.write(Path(CHECKER_PATH), io.BytesIO(checker_source()))
    done = await session.exec("python3", "-I", CHECKER_PATH, checker_args(outputs), shell=False)
    failure = None
    if done.exit_code != 0:
        failure = f"not checked: the checker failed in the sandbox (exit {done.exit_code})"
    return parse_reply(outputs, done.stdout, failure)


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
