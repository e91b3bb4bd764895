"""Host inputs into a live sandbox workspace.

The SDK's `LocalFile`/`LocalDir` entries only read sources under the current directory unless the
manifest grants extra paths, and a grant also exposes that path inside some backends (Docker
bind-mounts it). Job inputs are validated host paths chosen by the user, so coderoom copies them
in through the session's own file API instead: the sandbox sees the copies, never the host path.

Every workspace starts from `fresh_manifest`: a run, a live session (MCP, the page, the Python
API) and a rerun alike find an empty output/ there, so a first write to output/x needs no mkdir.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from agents.sandbox import Manifest
from agents.sandbox.entries import Dir
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

from .hostile.names import safe_relative_path


OUTPUT_DIR = "output"


def fresh_manifest() -> Manifest:
    """The manifest every new workspace is made from: an empty output/ and nothing else."""
    return Manifest(entries={OUTPUT_DIR: Dir()})


async def stage_inputs(session: BaseSandboxSession, inputs: dict[str, Path]) -> list[str]:
    """Copy each host file or folder to its workspace path; returns the workspace files written.

    Symlinks inside an input folder are skipped: a folder given as input must not pull in
    whatever its links point at.
    """
    written: list[str] = []
    for workspace_path, host_path in inputs.items():
        target = safe_relative_path(workspace_path)
        if host_path.is_dir():
            for source, rel in _walk_regular_files(host_path):
                written.append(await _copy_file(session, source, target / rel))
        else:
            written.append(await _copy_file(session, host_path, target))
    return written


def _walk_regular_files(root: Path) -> list[tuple[Path, PurePosixPath]]:
    files = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not (Path(folder) / d).is_symlink())
        for name in sorted(names):
            source = Path(folder) / name
            if source.is_file() and not source.is_symlink():
                files.append((source, PurePosixPath(source.relative_to(root).as_posix())))
    return files


async def _copy_file(session: BaseSandboxSession, source: Path, target: PurePosixPath) -> str:
    if len(target.parts) > 1:
        await session.mkdir(Path(target.parent), parents=True)
    with source.open("rb") as handle:
        await session.write(Path(target), handle)
    return str(target)
