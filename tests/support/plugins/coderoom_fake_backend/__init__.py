"""The fake sandbox backend: NO ISOLATION. Commands run as plain host subprocesses in a private
temp folder, for coderoom's own tests of what is not the sandbox (sessions, the page, export, MCP).

Why a plugin, not a module of coderoom: it is registered as any third-party backend is, through
the `coderoom.sandboxes` entry point of this folder's dist-info, which is on sys.path only under
pytest (`pythonpath` in pyproject.toml). It says `isolates = False`, so the registry never offers
it (not in `backend_names()`, refused in a job file, a flag or a record); a test reaches it by
name with `get_backend("fake", unconfined_no_isolation=True)` and hands the object to the
session code. Limits are kept (`started`), not enforced: only a command's wall clock is honoured,
so a test cannot hang. The SDK client is the SDK's own unconfined `UnixLocalSandboxClient` (a
private temp workspace, processes that outlive a call: the run_python kernel works on it).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import IO, Any

from pydantic import BaseModel, ConfigDict

from coderoom.hostile import archive as hostile_archive
from coderoom.sandboxes.base import EXIT_TIMEOUT
from coderoom.sandboxes.core import CommandResult
from coderoom.sandboxes.spec import SandboxSpec


class FakeOptions(BaseModel):
    """The fake takes no options of its own."""

    model_config = ConfigDict(extra="forbid")


class FakeSandbox:
    """`core.Sandbox` over a host temp folder: what a test of the callers needs, nothing confined."""

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.root = Path(tempfile.mkdtemp(prefix="coderoom-fake-"))

    def _path(self, path: PurePosixPath) -> Path:
        target = (self.root / path).resolve()
        if not target.is_relative_to(self.root.resolve()):
            raise PermissionError(f"{path} leaves the workspace")
        return target

    async def exec(
        self, argv: Sequence[str], *, timeout: float | None = None, stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        wall = min(timeout or self.spec.limits.timeout, self.spec.limits.timeout)
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=self.root, env={"PATH": os.defpath, "HOME": str(self.root), **(env or {})},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(stdin), wall)
        except TimeoutError:
            process.kill()
            stdout, stderr = await process.communicate()
            return CommandResult(EXIT_TIMEOUT, stdout, stderr, timed_out=True, stopped_by=f"timeout={wall:g}s")
        return CommandResult(process.returncode or 0, stdout, stderr)

    async def read_file(self, path: PurePosixPath, *, max_bytes: int) -> bytes:
        with self._path(path).open("rb") as handle:
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise OverflowError(f"{path} is over {max_bytes} bytes")
        return data

    async def write_file(self, path: PurePosixPath, data: bytes | IO[bytes]) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data if isinstance(data, bytes) else data.read())

    async def archive(self) -> IO[bytes]:
        return hostile_archive.archive(self.root, skip=set(), max_bytes=self.spec.limits.workspace_size)

    async def hydrate(self, tar: IO[bytes]) -> None:
        hostile_archive.safe_extract_tar(tar, self.root, max_bytes=self.spec.limits.workspace_size)

    async def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class FakeBackend:
    name = "fake"
    isolates = False
    leftovers = "temp folder"
    summary = "NO ISOLATION: host subprocesses in a temp folder, for coderoom's own tests"

    def __init__(self) -> None:
        self.started: list[SandboxSpec] = []  # every spec asked for, limits as given (not enforced)

    def options_model(self) -> type[BaseModel]:
        return FakeOptions

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        return None

    def prepare(self, spec: SandboxSpec, progress: Any) -> None:
        """Nothing to prepare."""

    async def start(self, spec: SandboxSpec) -> FakeSandbox:
        self.started.append(spec)
        return FakeSandbox(spec)

    def client(self, spec: SandboxSpec) -> tuple[Any, Any]:
        from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

        self.started.append(spec)
        return UnixLocalSandboxClient(), None

    def prune(self) -> int:
        return 0

    def info(self) -> str:
        return "nothing: no limit is enforced (no isolation; the wall clock of a core exec only)"

    def commands(self) -> None:
        return None


backend = FakeBackend()
