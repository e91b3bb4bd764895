"""The SDK's Docker client and session, subclassed as a thin adapter over the core (`container`).

The SDK's DockerSandboxClient creates the container (through `_create_container`, which takes
the core's hardened settings) and its session keeps the SDK's bookkeeping; everything that
reaches the container goes through `container.DockerSandbox`: commands (init.py's channel, the
local backend's rules), writes, archives and unpacking, removal on shutdown, and PTY sessions
(`pty_sessions` over init.py's live jobs, `live`: no `docker exec`, so the wall clock, output
bound and seccomp filter of every command hold for them too).
"""

from __future__ import annotations

import asyncio
import io
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from agents.sandbox.entries import Mount
from agents.sandbox.errors import (
    ExecTimeoutError,
    SandboxError,
    ExecTransportError,
    WorkspaceArchiveReadError,
    WorkspaceReadNotFoundError,
    WorkspaceArchiveWriteError,
)
from agents.sandbox.manifest import Manifest
from agents.sandbox.sandboxes.docker import (
    DockerSandboxClient,
    DockerSandboxClientOptions,
    DockerSandboxSession,
    DockerSandboxSessionState,
)
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.manager import Instrumentation
from agents.sandbox.session.sandbox_client import SandboxSessionState
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec
from agents.sandbox.types import ExecResult, User
from docker.models.containers import Container

from ...egress.session import EgressListener
from ...errors import CoderoomError, SandboxFailed
from ..core import READ_IN_WORKSPACE
from ..limits import Limits
from ..live import LiveProcess
from ..one_user import plain_shell
from ..pty_sessions import PtySessions
from ..sdk_errors import refuse_unsupported, snapshot_errors
from ..sdk_resume import TrustedResume
from ..sdk_snapshots import restore_on_resume
from ..stops import log_stop
from . import egress
from .container import DockerSandbox, create_container, new_egress_dir, seccomp_program
from .helpers import (
    SANDBOX_UID_READ_S, SandboxReadTimeout, read_timeout_message, sandbox_read_deadline, seconds_left,
)
from .labels import LABEL, SESSION_LABEL
from .live import DockerLive
from .network import network_name
from . import bindings
from .request import RESOLV_CONF_BIND, create_request


class CoderoomDockerSession(PtySessions, DockerSandboxSession):
    """The SDK session over a `DockerSandbox` (the container the SDK client created)."""

    _limits: Limits
    _core: DockerSandbox
    _binding: Path | None = None  # the run it serves, kept on the host (`bindings`)
    limits_hit: list[str]  # see sdk_session_adapter.limits_hit

    def _adopt(self, limits: Limits, egress_dir: Path | None) -> None:
        self._limits = limits
        self.limits_hit = []
        self._core = DockerSandbox(
            self._docker_client, self.state.container_id, limits, root=self.state.manifest.root, egress_dir=egress_dir
        )

    def watch_egress(self, listener: EgressListener) -> None:
        """`egress.session.ReportsEgress`: the core's proxy, for the run's record."""
        self._core.watch_egress(listener)

    async def running(self) -> bool:
        """False once shut down. The SDK's answer reloads the container and, when that fails (it
        is removed at shutdown), falls back to the last status it saw: "running". Event sinks
        such as WorkspaceJsonlSink ask this before writing, and failed on every close."""
        return not self._core.closed and await super().running()

    # PTY sessions (`pty_sessions`): init.py jobs, never `docker exec` (see `live`)

    def _live_limits(self) -> Limits:
        return self._limits

    async def _start_live(self, argv: list[str], *, tty: bool, lifetime: float | None) -> DockerLive:
        return await self._core.start_process(argv, tty=tty, lifetime=lifetime)

    async def _start_channel(self, argv: list[str], cap: int) -> DockerLive:
        return await self._core.start_process(argv, tty=False, lifetime=None, channel_cap=cap)

    async def _end_live(self, process: LiveProcess) -> None:
        assert isinstance(process, DockerLive)
        await self._core.end_process(process)

    async def _end_all_live(self) -> None:
        await self._core.stop_processes()

    async def provision_manifest_accounts(self) -> None:
        refuse_unsupported(self.state.manifest, "docker")  # create() refused them already

    def _prepare_exec_command(
        self, *command: str | Path, shell: bool | list[str], user: str | User | None
    ) -> list[str]:
        return super()._prepare_exec_command(
            *command, shell=plain_shell(shell, user, "docker"), user=None
        )

    async def _exec_run(
        self,
        *,
        cmd: list[str],
        workdir: str | None,
        user: str | None,
        timeout: float | None,
        command_for_errors: tuple[str | Path, ...],
        kill_on_timeout: bool,
    ) -> ExecResult:
        """Like the local backend: Limits.timeout ends in exit 124; a shorter caller timeout raises."""
        if user:
            raise ValueError("the docker sandbox runs every command as its one sandbox user")
        limit = self._limits.timeout
        try:
            result = await self._core.exec(cmd, timeout=timeout, cwd=workdir)
        except SandboxFailed as e:
            if isinstance(e.__cause__, TimeoutError):
                raise ExecTimeoutError(command=command_for_errors, timeout_s=timeout, cause=e) from e
            raise ExecTransportError(command=command_for_errors, cause=e) from e
        stderr = result.stderr
        if result.timed_out:
            if timeout is not None and timeout < limit:
                raise ExecTimeoutError(command=command_for_errors, timeout_s=timeout)
            stderr += f"\n[coderoom: killed after the {limit:g} s wall-clock limit]\n".encode()
        log_stop(self.limits_hit, result.stopped_by)
        return ExecResult(stdout=result.stdout, stderr=stderr, exit_code=result.exit_code)

    async def exec_helper(self, *argv: str, reply_bytes: int) -> ExecResult:
        """A host helper command (the output check): in the workspace, as a uid sandbox code
        cannot signal, with a deadline (`DockerSandbox.helper`); HelperTimeout past it."""
        result = await self._core.helper(argv, cap=reply_bytes, what=f"the host helper {argv[0]}")
        return ExecResult(stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code)

    async def read(self, path: Path, *, user: Any = None) -> io.IOBase:
        return io.BytesIO(await self._read_bytes(path, self._limits.workspace_size))

    async def _read_bounded(self, path: Path, *, max_bytes: int) -> bytes:
        """At most the first `max_bytes` (the SDK's contract: a prefix, not an error)."""
        return await self._read_bytes(path, max_bytes, prefix=True)

    async def read_bounded(self, path: Path, *, max_bytes: int) -> bytes:
        """The SDK's `read_bounded` (its errors carry no payload: not found, or a failed read
        with its reason), except that a read past its deadline stays an ExecTimeoutError: the
        SDK's boundary would make it a nameless failed read (A3-D2)."""
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        reason, retryable, missing, timed_out = "bounded_read_failed", None, False, False
        try:
            return await self._read_bounded(path, max_bytes=max_bytes)
        except (FileNotFoundError, WorkspaceReadNotFoundError):
            missing = True
        except ExecTimeoutError:
            timed_out = True
        except SandboxError as error:
            retryable = error.retryable
            if error.context.get("reason") == "bounded_read_wire_limit":
                reason = "bounded_read_wire_limit"
        except Exception:  # the provider's diagnostics may carry file bytes: dropped here
            pass
        # raised outside the handlers, so no payload-bearing exception rides along as context
        if missing:
            raise WorkspaceReadNotFoundError(path=path)
        if timed_out:
            raise ExecTimeoutError(command=("read", str(path)), timeout_s=SANDBOX_UID_READ_S)
        raise WorkspaceArchiveReadError(path=path, context={"reason": reason}, retryable=retryable)

    async def _read_bytes(self, path: Path, max_bytes: int, *, prefix: bool = False) -> bytes:
        """A workspace file through the core (a host helper: no symlink followed, a FIFO or
        device refused at once), at the path as written (checked lexically, so no sandbox
        command runs first); only a path through a symlink is then resolved inside the
        container (the SDK's helper command), where it cannot reach the host, and read only if
        it is a regular file there. Every sandbox-uid command of the read (these two, and the
        core's for a locked file) ends by one deadline (`helpers.SANDBOX_UID_READ_S`): past it,
        ExecTimeoutError, never "not found"."""
        target = self.normalize_path(path)
        deadline = sandbox_read_deadline()
        try:
            try:
                return await self._core.read_file(self._relative(target), max_bytes=max_bytes, deadline=deadline)
            except FileNotFoundError as e:
                raise WorkspaceReadNotFoundError(path=path, cause=e) from e
            except OverflowError as e:
                if not prefix:
                    raise WorkspaceArchiveReadError(path=path, cause=e) from e
            except SandboxReadTimeout:
                raise
            except OSError:
                pass
            return await self._read_through_links(path, max_bytes, prefix=prefix, deadline=deadline)
        except SandboxReadTimeout as e:
            raise ExecTimeoutError(command=("read", str(path)), timeout_s=SANDBOX_UID_READ_S, cause=e) from e

    async def _read_through_links(self, path: Path, max_bytes: int, *, prefix: bool, deadline: float) -> bytes:
        """`_read_bytes`' path through a symlink: resolved and read by sandbox-uid commands."""
        what = f"reading {path} through a link"
        try:
            async with asyncio.timeout(seconds_left(deadline, what)):
                target = await self._validate_path_access(path)
        except TimeoutError:
            raise SandboxReadTimeout(read_timeout_message(what)) from None
        root = str(self._workspace_root_path())
        result = await self._core.exec(
            ["sh", "-c", READ_IN_WORKSPACE, "sh", str(target), root, str(max_bytes + 1)],
            timeout=seconds_left(deadline, what), output_cap=max_bytes + 1,
        )  # fmt: skip
        if result.timed_out:
            raise SandboxReadTimeout(read_timeout_message(what))
        if result.exit_code != 0:
            raise WorkspaceReadNotFoundError(path=path, context={"stderr": result.stderr[:4096]})
        if len(result.stdout) > max_bytes and not prefix:
            raise WorkspaceArchiveReadError(path=path, context={"reason": f"larger than {max_bytes} bytes"})
        return result.stdout[:max_bytes]

    async def write(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        if user is not None:
            raise ValueError("the docker sandbox writes every file as its one sandbox user")
        target = await self._validate_path_access(path, for_write=True)
        try:
            await self._core.write_file(self._relative(target), data)  # type: ignore[arg-type]
        except (OSError, ValueError, CoderoomError) as e:
            raise WorkspaceArchiveWriteError(path=target, cause=e) from e

    async def _write_new_file(self, path: Path, data: io.IOBase, *, user: str | User | None = None) -> None:
        """apply_patch's "Add File": FileExistsError (the SDK's signal) when the name exists,
        a dangling symlink included; no symlink followed on the way (inside/files.py)."""
        if user is not None:
            raise ValueError("the docker sandbox writes every file as its one sandbox user")
        requested = self._workspace_path_policy().absolute_workspace_path(path)
        target = await self._validate_path_access(requested.parent, for_write=True) / requested.name
        try:
            await self._core.write_file(self._relative(target), data, exclusive=True)  # type: ignore[arg-type]
        except FileExistsError:
            raise
        except (OSError, ValueError, CoderoomError) as e:
            raise WorkspaceArchiveWriteError(path=target, cause=e) from e

    def _relative(self, path: Path) -> PurePosixPath:
        return PurePosixPath(path.as_posix()).relative_to(self._workspace_root_path().as_posix())

    async def persist_workspace(self) -> io.IOBase:
        """The core's archive: every process killed first, bounded in bytes and time. (The SDK
        copies to /tmp and uses Docker's archive API, which cannot see tmpfs mounts.)"""
        skip = {PurePosixPath(p.as_posix()) for p in self._persist_workspace_skip_relpaths()}
        try:
            return await self._core.archive(skip=skip, snapshot=True)  # type: ignore[return-value]
        except CoderoomError as e:
            raise WorkspaceArchiveReadError(path=self._workspace_root_path(), cause=e) from e

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        """The snapshot restored exactly, or WorkspaceArchiveWriteError with the SDK's `reason`
        and `member` context (see `hostile.snapshot`)."""
        with snapshot_errors(self._workspace_root_path()):
            await self._core.restore_snapshot(data)  # type: ignore[arg-type]

    async def _restore_snapshot_into_workspace_on_resume(self) -> None:
        """Checked before the workspace is cleared (`sdk_snapshots`)."""
        await restore_on_resume(self, self._core, self._limits.workspace_size)

    def bind_run(self, run_dir: Path, owner: str) -> None:
        """`orphans.KeepsRunRecord`: which run folder and run this container serves, so a
        restart or `prune` after its owner died saves its workspace there (`bindings`): the
        container is told to outlive a lost owner by `bindings.recovery_window()`. An init.py
        that cannot be told is no error here (its channel broke: the next command says so)."""
        self._binding = bindings.bind(self._binding, self._core.container_id, run_dir, owner, self._core.root)
        try:
            self._core.keep_for_recovery(bindings.recovery_window())
        except SandboxFailed:
            pass

    async def _shutdown_backend(self) -> None:
        try:
            await self._core.close()
        finally:
            bindings.unbind(self._binding)
            self._binding = None


class CoderoomDockerClient(DockerSandboxClient):
    """The SDK's client with coderoom's container settings and session class."""

    def __init__(
        self,
        docker_client: Any,
        *,
        limits: Limits,
        image: str,
        snapshot: SnapshotSpec | None = None,
        instrumentation: Instrumentation | None = None,
    ) -> None:
        """`image` is the one every container of this client runs, a resumed one too (AP-R2);
        `snapshot`, where sessions this client did not create keep their snapshot (`sdk_resume`)."""
        super().__init__(docker_client, instrumentation=instrumentation)
        self._limits = limits
        self._image = image
        self._trusted = TrustedResume(snapshot)
        # with an allowlist: container id -> the folder of its proxy's socket (`egress`), made
        # with the container and handed to its session's core, which removes it at close
        self._egress_dirs: dict[str, Path] = {}

    def _wrap_session(
        self, inner: BaseSandboxSession, *, instrumentation: Instrumentation | None = None
    ) -> SandboxSession:
        # The SDK's create()/resume() construct DockerSandboxSession directly; re-class the fresh
        # instance (all its state kept) instead of copying those two long methods.
        if type(inner) is DockerSandboxSession:
            inner.__class__ = CoderoomDockerSession
            assert isinstance(inner, CoderoomDockerSession)
            inner._adopt(self._limits, self._egress_dirs.get(inner.state.container_id))
        return super()._wrap_session(inner, instrumentation=instrumentation)

    async def create(
        self,
        *,
        snapshot: SnapshotSpec | SnapshotBase | None = None,
        manifest: Manifest | None = None,
        options: DockerSandboxClientOptions,
    ) -> SandboxSession:
        """The SDK's create, after refusing what coderoom does not offer (before any container)."""
        refuse_unsupported(manifest or Manifest(), "docker", exposed_ports=options.exposed_ports)
        if options.image != self._image:
            raise ValueError(f"this client runs image {self._image!r} only, not {options.image!r}")
        session = await super().create(snapshot=snapshot, manifest=manifest, options=options)
        self._trusted.remember(session.state)
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        """Resume a session: its container if it still runs, else a new one restored from the
        snapshot (the SDK's path). The SDK refuses a live container with any bind mount the
        manifest did not grant, and coderoom's carry one when the network is off (/dev/null on
        /etc/resolv.conf, NET-03); so a live container is checked here against what coderoom
        made (its labels and session, that one bind, its network: none, or the session's own) and adopted."""
        if not isinstance(state, DockerSandboxSessionState):
            raise TypeError("CoderoomDockerClient.resume expects a DockerSandboxSessionState")
        refuse_unsupported(state.manifest, "docker", exposed_ports=state.exposed_ports)
        self._trusted.distrust(state)  # the snapshot and the manifest's host files (sdk_resume)
        state.image = self._image  # the image comes from the trusted spec, not from state (AP-R2)
        container = self.get_container(state.container_id)
        if container is None or state.mount_authority_rebound:
            return await super().resume(state)
        await asyncio.to_thread(container.reload)
        _assert_coderoom_container(container, state, self._limits, self._egress_dirs.get(state.container_id))
        inner = DockerSandboxSession(
            container=container, docker_client=self.docker_client, state=state, removal_service=self._removal_service
        )
        inner._resume_workspace_probe_pending = True
        inner._set_start_state_preserved(True)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def _create_container(
        self,
        image: str,
        *,
        manifest: Manifest | None = None,
        exposed_ports: tuple[int, ...] = (),
        network_mode: str | None = None,
        session_id: uuid.UUID | None = None,
        labels: dict[str, str] | None = None,
    ) -> Container:
        manifest = manifest or Manifest()
        if any(isinstance(entry, Mount) for _, entry in manifest.iter_entries()) or any(
            grant.host_path is not None for grant in manifest.extra_path_grants
        ):
            raise ValueError("coderoom's docker sandbox takes no mounts or host path grants")
        if exposed_ports:
            raise ValueError("coderoom's docker sandbox publishes no ports")
        if network_mode not in (None, "none"):
            raise ValueError("coderoom's docker sandbox takes its network from Limits.network only")
        if not self.image_exists(image):
            raise ValueError(f"Docker image {image!r} not found; run `coderoom image build`")
        egress_dir = await asyncio.to_thread(new_egress_dir, self._limits)
        try:
            request = create_request(
                self._limits, image=image, program=await asyncio.to_thread(seccomp_program, self.docker_client),
                root=manifest.root, session_id=session_id, labels=labels,
                environment=await manifest.environment.resolve(), egress_dir=egress_dir,
            )  # fmt: skip
            container_id = await asyncio.to_thread(create_container, self.docker_client, request)
        except BaseException:
            if egress_dir is not None:
                await asyncio.shield(asyncio.to_thread(egress.remove, egress_dir))
            raise
        if egress_dir is not None:
            self._egress_dirs[container_id] = egress_dir
        return await asyncio.to_thread(self.docker_client.containers.get, container_id)


def _assert_coderoom_container(
    container: Container, state: DockerSandboxSessionState, limits: Limits, egress_dir: Path | None
) -> None:
    """ValueError (the SDK's refusal) unless `container` is the one coderoom made for `state`:
    coderoom's labels with this session's id, network none or (network on) the session's own, and no bind
    mount but coderoom's own resolv.conf one and, with an allowlist, the folder of the proxy's
    socket this client made for it (`egress_dir`: a container whose proxy is another process's,
    or gone, is not adopted)."""
    attrs = container.attrs or {}
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    if labels.get(LABEL) != "1" or labels.get(SESSION_LABEL) != state.session_id.hex:
        raise ValueError("the container is not this coderoom session's; create a fresh sandbox session")
    if any(labels.get(key) != value for key, value in state.labels.items()):
        raise ValueError("Existing Docker sandbox labels do not match persisted labels; create a fresh sandbox session")
    binds = [m for m in attrs.get("Mounts") or [] if isinstance(m, dict) and m.get("Type") == "bind"]
    expected = [] if limits.network else [RESOLV_CONF_BIND]
    if limits.egress is not None:
        if egress_dir is None:
            raise ValueError("the container's egress proxy is not this client's; create a fresh sandbox session")
        expected.append((str(egress_dir), egress.INSIDE_DIR))
    found = [(str(m.get("Source")), str(m.get("Destination"))) for m in binds]
    if sorted(found) != sorted(expected):  # the engine lists mounts in no set order (a Go map)
        raise ValueError("the container's bind mounts are not coderoom's; create a fresh sandbox session")
    network_mode = (attrs.get("HostConfig") or {}).get("NetworkMode")
    if network_mode != (network_name(state.session_id.hex) if limits.network else "none"):
        raise ValueError("the container's network is not the one its limits give; create a fresh sandbox session")
