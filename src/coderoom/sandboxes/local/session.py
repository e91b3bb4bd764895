"""The Agents SDK's view of the local sandbox: `LocalSandboxClient` and `LocalSandboxSession`,
thin adapters over `sandbox.LocalSandbox` (which says what the sandbox enforces).

The adapter turns SDK calls into core calls and core errors into the SDK's: absolute sandbox
paths (validated by the SDK) into workspace-relative ones, the manifest's environment into each
command's, a shorter caller `timeout=` that fired into ExecTimeoutError, SandboxFailed into
ExecTransportError, and long-lived processes (`LocalSandbox.start_process`) into PTY sessions
with the SDK's semantics (`pty_sessions`): tty=true gives a terminal made inside the sandbox.
"""

from __future__ import annotations

import asyncio
import io
import uuid
from pathlib import Path, PurePosixPath
from typing import IO, Literal, cast

from agents.sandbox import Manifest
from agents.sandbox.errors import (
    ExecTimeoutError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.session import SandboxSession, SandboxSessionState
from agents.sandbox.session.sandbox_client import (
    BaseSandboxClient,
    BaseSandboxClientOptions,
)
from agents.sandbox.session.workspace_payloads import coerce_write_payload
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
from agents.sandbox.types import ExecResult, User
from pydantic import Field

from ...egress.session import EgressListener
from ..limits import Limits
from ..live import LiveProcess
from ..one_user import plain_shell
from ..pty_sessions import PtySessions, transport
from ..sdk_errors import UnsupportedFeature, refuse_unsupported, snapshot_errors
from ..sdk_resume import TrustedResume
from ..sdk_session_adapter import backend_session
from ..sdk_snapshots import restore_on_resume
from ..spec import LimitsField
from ..stops import log_stop
from . import bwrap, host_dir
from .longlived import LongLived
from .sandbox import LocalSandbox


class LocalSandboxSessionState(SandboxSessionState):
    type: Literal["coderoom_local"] = "coderoom_local"
    host_dir: str = ""
    limits: LimitsField = Field(default_factory=Limits)


class LocalSandboxClientOptions(BaseSandboxClientOptions):
    type: Literal["coderoom_local"] = "coderoom_local"


class LocalSandboxSession(PtySessions):
    state: LocalSandboxSessionState

    def __init__(self, state: LocalSandboxSessionState, bw: bwrap.Bwrap, packages: Path | None = None) -> None:
        self.state = state
        self.sandbox = LocalSandbox(state.limits, bw, Path(state.host_dir), root=state.manifest.root, packages=packages)
        self._running = False
        self.limits_hit: list[str] = []  # see sdk_session_adapter.limits_hit

    @property
    def host_dir(self) -> Path:
        return self.sandbox.host_dir

    def watch_egress(self, listener: EgressListener) -> None:
        self.sandbox.watch_egress(listener)

    def bind_run(self, run_dir: Path, owner: str) -> None:
        """Record the run folder this workspace is saved into if its owner dies (see `orphans`)."""
        host_dir.bind_run(self.host_dir, run_dir, owner)

    def _rel(self, path: Path | str, *, for_write: bool = False) -> PurePosixPath:
        """The workspace-relative path for a sandbox path (the SDK validates containment)."""
        normalized = PurePosixPath(self.normalize_path(path, for_write=for_write).as_posix())
        return normalized.relative_to(self.sandbox.root)

    # ------------------------------------------------------------------ lifecycle

    async def _ensure_backend_started(self) -> None:
        async with transport(("start",)):
            await self.sandbox.start()  # the launcher starts while the SDK applies the manifest

    async def _after_start(self) -> None:
        self._running = True

    async def _after_start_failed(self) -> None:
        self._running = False

    async def _after_shutdown(self) -> None:
        self._running = False
        self._pty_sessions().clear()
        await self.sandbox.stop()

    async def running(self) -> bool:
        return self._running

    async def provision_manifest_accounts(self) -> None:
        refuse_unsupported(self.state.manifest, "local")  # create() refused them already

    # ------------------------------------------------------------------ exec

    def _prepare_exec_command(
        self, *command: str | Path, shell: bool | list[str], user: str | User | None
    ) -> list[str]:
        return super()._prepare_exec_command(
            *command, shell=plain_shell(shell, user, "local"), user=None
        )

    async def _exec_internal(self, *command: str | Path, timeout: float | None = None) -> ExecResult:
        async with transport(command):
            result = await self.sandbox.exec([str(c) for c in command], timeout=timeout, env=await self._env())
        if result.timed_out and timeout is not None and timeout < self.state.limits.timeout:
            raise ExecTimeoutError(command=command, timeout_s=timeout)
        log_stop(self.limits_hit, result.stopped_by)
        return ExecResult(stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code)

    async def _env(self) -> dict[str, str]:
        """The manifest's environment, resolved for each command (an `EnvValue` may be a lookup
        that changes); an empty one skips the SDK's gather, which costs a command more than its
        launcher's hand-off (issue 25)."""
        environment = self.state.manifest.environment
        return await environment.resolve() if environment.value else {}

    # ------------------------------------------------------------------ PTY sessions (`pty_sessions`)

    def _live_limits(self) -> Limits:
        return self.state.limits

    async def _start_live(self, argv: list[str], *, tty: bool, lifetime: float | None) -> LongLived:
        return await self.sandbox.start_process(argv, env=await self._env(), tty=tty, lifetime=lifetime)

    async def _start_channel(self, argv: list[str], cap: int) -> LongLived:
        return await self.sandbox.start_process(argv, env=await self._env(), lifetime=None, channel_cap=cap)

    async def _end_live(self, process: LiveProcess) -> None:
        assert isinstance(process, LongLived)
        await self.sandbox.end_process(process)

    async def _end_all_live(self) -> None:
        await self.sandbox.stop_processes()

    async def _stopped_by(self, exit_code: int, output: bytes) -> str | None:
        """The workspace limit first, as for a command (its RLIMIT_FSIZE is at most the
        workspace size, so a writer over it often ends by SIGXFSZ)."""
        return await self.sandbox.workspace_overrun() or await super()._stopped_by(exit_code, output)

    # ------------------------------------------------------------------ files

    async def read(self, path: Path, *, user: str | User | None = None) -> io.IOBase:
        try:
            async with transport(("read", str(path))):
                return await self.sandbox.open_file(self._rel(path))  # type: ignore[return-value]
        except FileNotFoundError as exc:
            raise WorkspaceReadNotFoundError(path=path, cause=exc) from exc
        except OverflowError as exc:
            raise WorkspaceArchiveReadError(path=path, context={"reason": "larger than the workspace limit"}) from exc

    async def _read_bounded(self, path: Path, *, max_bytes: int) -> bytes:
        """The caller's bound reaches the sandbox: a read through a symlink stops there (A01)."""
        try:
            async with transport(("read", str(path))):
                return await self.sandbox.read_prefix(self._rel(path), max_bytes=max_bytes)
        except FileNotFoundError as exc:
            raise WorkspaceReadNotFoundError(path=path, cause=exc) from exc

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        payload = coerce_write_payload(path=path, data=data)
        try:
            async with transport(("write", str(path))):
                await self.sandbox.write_file(self._rel(path, for_write=True), cast(IO[bytes], payload.stream))
        except OSError as exc:
            raise WorkspaceArchiveWriteError(path=Path(path), cause=exc) from exc

    async def _write_new_file(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        """apply_patch's "Add File": FileExistsError (the SDK's signal) when the name exists,
        a dangling symlink included; never written through a symlink on the host."""
        if user is not None:
            raise ValueError("the local sandbox writes every file as its one sandbox user")
        payload = coerce_write_payload(path=path, data=data)
        try:
            async with transport(("write", str(path))):
                await self.sandbox.create_file(self._rel(path, for_write=True), cast(IO[bytes], payload.stream))
        except FileExistsError:
            raise
        except OSError as exc:
            raise WorkspaceArchiveWriteError(path=Path(path), cause=exc) from exc

    async def mkdir(self, path: Path | str, *, parents: bool = False, user: str | User | None = None) -> None:
        try:
            await self.sandbox.make_dir(self._rel(path, for_write=True), parents=parents)
        except OSError:  # through a symlink: inside the sandbox, where it cannot reach the host
            await super().mkdir(path, parents=parents)

    # ------------------------------------------------------------------ snapshots

    async def persist_workspace(self) -> io.IOBase:
        skip = {PurePosixPath(p.as_posix()) for p in self._persist_workspace_skip_relpaths()}
        try:
            return await self.sandbox.archive(skip=skip, snapshot=True)  # type: ignore[return-value]
        except OSError as exc:
            raise WorkspaceArchiveReadError(path=Path(self.sandbox.root), cause=exc) from exc

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        """The snapshot restored exactly, or WorkspaceArchiveWriteError with the SDK's `reason`
        and `member` context (see `hostile.snapshot`)."""
        with snapshot_errors(Path(self.sandbox.root)):
            await self.sandbox.restore_snapshot(data)  # type: ignore[arg-type]

    async def _restore_snapshot_into_workspace_on_resume(self) -> None:
        """Checked before the workspace is cleared (`sdk_snapshots`)."""
        await restore_on_resume(self, self.sandbox, self.state.limits.workspace_size)


class LocalSandboxClient(BaseSandboxClient[LocalSandboxClientOptions | None]):
    """Creates `LocalSandboxSession`s; `delete` removes the session's host directory. `snapshot`
    is where sessions this client did not create keep their snapshot on resume (`sdk_resume`)."""

    backend_id = "coderoom_local"
    supports_default_options = True

    def __init__(
        self, limits: Limits, bw: bwrap.Bwrap, *, snapshot: SnapshotSpec | None = None, packages: Path | None = None
    ) -> None:
        """`packages`: a built package environment's site-packages (from the trusted spec, as the limits)."""
        self._limits = limits
        self._bwrap = bw
        self._packages = packages
        self._trusted = TrustedResume(snapshot)

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: LocalSandboxClientOptions | None = None,
    ) -> SandboxSession:
        manifest = manifest if manifest is not None else Manifest()
        _check_manifest(manifest)
        self._validate_manifest_for_create(manifest)
        session_id = uuid.uuid4()
        state = LocalSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(snapshot, str(session_id)),
            host_dir=str(await asyncio.to_thread(self._new_folder, session_id)),
            limits=self._limits,
        )
        self._trusted.remember(state)
        return self._wrap_session(LocalSandboxSession(state, self._bwrap, self._packages))

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = backend_session(session)
        if not isinstance(inner, LocalSandboxSession):
            raise TypeError("LocalSandboxClient.delete expects a LocalSandboxSession")
        await inner.sandbox.close()  # shutdown stopped it already, unless it never ran
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        if not isinstance(state, LocalSandboxSessionState):
            raise TypeError("LocalSandboxClient.resume expects a LocalSandboxSessionState")
        _check_manifest(state.manifest)
        self._trusted.distrust(state)  # the snapshot and the manifest's host files (sdk_resume)
        preserved = await asyncio.to_thread(host_dir.adoptable, Path(state.host_dir), state.session_id.hex)
        if not preserved:  # never trust a path from serialized state: start a fresh directory
            state.host_dir = str(await asyncio.to_thread(self._new_folder, state.session_id))
            state.workspace_root_ready = False
        state.limits = self._limits  # limits come from the trusted spec, not from state
        inner = LocalSandboxSession(state, self._bwrap, self._packages)
        inner._set_start_state_preserved(preserved)
        return self._wrap_session(inner)

    def _new_folder(self, session_id: uuid.UUID) -> Path:
        folder = host_dir.make(self._packages, egress=self._limits.egress is not None)
        host_dir.bind(folder, session_id.hex)
        return folder

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, LocalSandboxSessionState)


def _check_manifest(manifest: Manifest) -> None:
    """What the local sandbox cannot offer, refused before a session folder exists."""
    refuse_unsupported(manifest, "local")
    if manifest.extra_path_grants:  # the ones without a host_path: paths inside the sandbox
        raise UnsupportedFeature(
            "extra path grants",
            "the local sandbox's file operations reach its workspace only; copy inputs in with "
            "Manifest entries (File, LocalFile, LocalDir) or session.write()",
            "local",
        )
    problem = bwrap.root_problem(manifest.root)
    if problem:
        raise UnsupportedFeature(
            f"the workspace root {manifest.root!r} ({problem})",
            f"give Manifest.root an absolute path inside the sandbox clear of {', '.join(bwrap.SANDBOX_PATHS)}, "
            f"such as the default {bwrap.WORKSPACE} or /srv/ws (the root is never a host path)",
            "local",
        )
