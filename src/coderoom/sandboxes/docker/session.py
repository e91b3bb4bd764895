"""The SDK's Docker client and session, subclassed: hardened container, fast commands, fast close.

* Container: non-root, read-only root, tmpfs /tmp and workspace (sizes from Limits), all
  capabilities dropped, no-new-privileges, Docker's default seccomp profile, `network none`
  unless allowed, memory/CPU/pids/rlimits from Limits, no host environment, no logging of
  command output, labels for `coderoom sandbox prune`.
* Seccomp: Docker's default profile misses what the local backend's filter catches (io_uring,
  exotic socket families, i386/x32 calls, TIOCSTI), so init.py stacks that very filter
  (seccomp.py's program, passed in the environment) on PID 1 before it runs anything; processes
  the SDK starts with `docker exec` for the model (the Python kernel, via pty_exec_start) go
  through init.py's `--exec` launcher, which does the same. Host-side `docker exec`s (archives,
  large uploads) run unfiltered but only run tar/find/cat/head, which interpret no workspace
  content; HOME points nowhere so the SDK's `sh -l` wrappers read no sandbox-written profile.
* PID 1 is image/init.py (passed as the command, so any image with Python 3 works): it reaps,
  exits on SIGTERM, and runs commands sent over the container's attached stdin. Commands then
  cost a fork instead of a `docker exec` (~50 ms of runc per call), and get the local backend's
  rules: wall-clock timeout killing the whole tree (exit 124), bounded output, 137 on SIGKILL.
* Close removes the container (`force`), which takes well under a second.
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import io
import json
import logging
import tarfile
import tempfile
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import docker.errors
from agents.sandbox.entries import Mount
from agents.sandbox.errors import (
    ExecTimeoutError,
    ExecTransportError,
    WorkspaceArchiveReadError,
)
from agents.sandbox.manifest import Manifest
from agents.sandbox.sandboxes.docker import (
    DockerSandboxClient,
    DockerSandboxSession,
    _measure_stream,
)
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.manager import Instrumentation
from agents.sandbox.session.pty_types import PtyExecUpdate
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.types import ExecResult, User
from docker.models.containers import Container
from docker.types import LogConfig, Ulimit
from docker.types import Mount as DockerMount
from docker.utils.socket import frames_iter

from ..limits import Limits
from ..one_user import plain_shell, refuse_manifest_accounts
from ..seccomp import arch_named, build_filter
from .labels import CONTACT_WITHIN_S, CREATED_LABEL, LABEL, SESSION_LABEL, owner_labels

logger = logging.getLogger(__name__)

SANDBOX_UID = 1000
INIT_SOURCE = (Path(__file__).with_name("inside") / "init.py").read_text()
_INIT_ENV = "CODEROOM_INIT"
_INIT_BOOTSTRAP = f"import os; exec(compile(os.environ.pop({_INIT_ENV!r}), 'coderoom-init', 'exec'))"
_SECCOMP_ENV = "CODEROOM_SECCOMP"  # init.py's SECCOMP_ENV
# `docker exec` processes get the container's environment, so init.py is there for them too
_FILTERED_EXEC = ("python3", "-I", "-S", "-c", _INIT_BOOTSTRAP, "--exec")
_NO_HOME = "/nonexistent"
_INLINE_STDIN_MAX = 64 * 1024 * 1024  # larger uploads go through `docker exec` streaming
_FILE_OP_TIMEOUT_S = 600.0  # reads, uploads and archives: bounded by size, not by Limits.timeout
_NOFILE = 1024
_REPLY_SLACK_S = 15.0  # how long past a command's own deadline we wait before blaming the channel

# Raised by file reads so `cat` of a large workspace file is not cut at Limits.output_bytes.
_output_cap: contextvars.ContextVar[int | None] = contextvars.ContextVar("output_cap", default=None)


class _Channel:
    """Host end of init.py's command protocol over one attach socket; replies matched by id."""

    def __init__(self, api: Any, container_id: str) -> None:
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        self._sock = api.attach_socket(container_id, params=params)
        self._raw = getattr(self._sock, "_sock", self._sock)
        self._send_lock = threading.Lock()
        self._waiters: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[dict[str, Any]]]] = {}
        self._waiters_lock = threading.Lock()
        self.closed_reason: str | None = None
        self._reader = threading.Thread(
            target=self._pump, daemon=True, name=f"coderoom-docker-{container_id[:12]}"
        )
        self._reader.start()

    async def call(self, request: dict[str, Any], *, wait: float) -> dict[str, Any]:
        rid = uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        with self._waiters_lock:
            if self.closed_reason is not None:
                raise ConnectionError(self.closed_reason)
            self._waiters[rid] = (loop, future)
        line = (json.dumps({**request, "id": rid}) + "\n").encode()
        try:
            if len(line) < 65536:
                self._send(line)
            else:
                await loop.run_in_executor(None, self._send, line)
            return await asyncio.wait_for(future, wait)
        finally:
            with self._waiters_lock:
                self._waiters.pop(rid, None)

    def hello(self) -> None:
        """An empty line: tells init.py the host has attached (see its --contact-within)."""
        self._send(b"\n")

    def close(self) -> None:
        self._fail_all("the channel was closed")
        try:
            self._sock.close()
        except OSError:
            pass

    def _send(self, line: bytes) -> None:
        with self._send_lock:
            self._raw.sendall(line)

    def _pump(self) -> None:
        buffer = b""
        try:
            for stream, chunk in frames_iter(self._raw, tty=False):
                if stream != 1:
                    logger.warning("sandbox init: %s", bytes(chunk).decode(errors="replace").rstrip())
                    continue
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._deliver(json.loads(line))
        except Exception as e:  # socket closed under us, or garbage on the stream
            logger.debug("sandbox channel reader stopped: %s", e)
        finally:
            self._fail_all("the sandbox's init process went away (container stopped or removed)")

    def _deliver(self, reply: dict[str, Any]) -> None:
        with self._waiters_lock:
            waiter = self._waiters.get(str(reply.get("id")))
        if waiter is not None:
            loop, future = waiter
            loop.call_soon_threadsafe(_resolve, future, reply)

    def _fail_all(self, reason: str) -> None:
        with self._waiters_lock:
            if self.closed_reason is None:
                self.closed_reason = reason
            waiters = list(self._waiters.values())
        for loop, future in waiters:
            loop.call_soon_threadsafe(_fail, future, ConnectionError(reason))


def _resolve(future: asyncio.Future[dict[str, Any]], reply: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(reply)


def _fail(future: asyncio.Future[dict[str, Any]], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)


class CoderoomDockerSession(DockerSandboxSession):
    """Commands through init.py, archives through `tar` streams, removal on shutdown."""

    _limits: Limits
    _channel: _Channel | None

    def _adopt(self, limits: Limits) -> None:
        self._limits = limits
        self._channel = None

    def supports_pty(self) -> bool:
        # PTY processes would run through `docker exec`, outside the timeout and output rules;
        # the SDK's shell tool falls back to one-shot commands.
        return False

    async def pty_exec_start(
        self,
        *command: str | Path,
        timeout: float | None = None,
        shell: bool | list[str] = True,
        user: str | User | None = None,
        tty: bool = False,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        """The SDK's `docker exec` process (no child of init.py), started through init.py's
        `--exec` launcher so it runs under the same stacked seccomp filter as every command."""
        argv = self._prepare_exec_command(*command, shell=shell, user=user)
        return await super().pty_exec_start(
            *_FILTERED_EXEC, *argv, timeout=timeout, shell=False, user=None, tty=tty,
            yield_time_s=yield_time_s, max_output_tokens=max_output_tokens,
        )  # fmt: skip

    async def _after_start(self) -> None:
        await super()._after_start()
        self._connected().hello()  # from now on, our death closes init.py's stdin

    def _connected(self) -> _Channel:
        channel = self._channel
        if channel is None or channel.closed_reason is not None:
            api = self._docker_client.api
            channel = self._channel = _Channel(api, self.state.container_id)
        return channel

    async def provision_manifest_accounts(self) -> None:
        refuse_manifest_accounts(self.state.manifest, "docker")

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
        cap = _output_cap.get() or self._limits.output_bytes
        limit = self._limits.timeout
        effective = limit if timeout is None else min(timeout, limit)
        result, timed_out = await self._run(
            cmd, workdir=workdir, timeout=effective, cap=cap, stdin=None, command_for_errors=command_for_errors
        )
        if timed_out:
            if effective < limit:
                raise ExecTimeoutError(command=command_for_errors, timeout_s=timeout)
            result.stderr += f"\n[coderoom: killed after the {effective:g} s wall-clock limit]\n".encode()
        return result

    async def _run(
        self,
        cmd: list[str],
        *,
        workdir: str | None,
        timeout: float,
        cap: int,
        stdin: bytes | None,
        command_for_errors: tuple[str | Path, ...],
    ) -> tuple[ExecResult, bool]:
        """Run `cmd` through init.py; returns the result and whether the deadline killed it."""
        request = {
            "argv": cmd,
            "cwd": workdir,
            "timeout": timeout,
            "limit": cap,
            "stdin": base64.b64encode(stdin).decode() if stdin is not None else None,
        }
        try:
            reply = await self._connected().call(request, wait=timeout + _REPLY_SLACK_S)
        except TimeoutError as e:
            raise ExecTimeoutError(command=command_for_errors, timeout_s=timeout, cause=e) from e
        except (ConnectionError, OSError, docker.errors.APIError) as e:
            raise ExecTransportError(command=command_for_errors, cause=e) from e
        if "error" in reply:  # could not start: bad argv, or fork hit the pids limit
            message = f"coderoom: could not start the command: {reply['error']}\n"
            return ExecResult(stdout=b"", stderr=message.encode(), exit_code=126), False
        result = ExecResult(
            stdout=base64.b64decode(reply["out"]),
            stderr=base64.b64decode(reply["err"]),
            exit_code=int(reply["code"]),
        )
        return result, bool(reply.get("timed_out"))

    async def read(self, path: Path, *, user: Any = None) -> io.IOBase:
        token = _output_cap.set(self._limits.workspace_size + 1)
        try:
            return await super().read(path, user=user)
        finally:
            _output_cap.reset(token)

    async def _read_bounded(self, path: Path, *, max_bytes: int) -> bytes:
        token = _output_cap.set(max_bytes + 1)
        try:
            return await super()._read_bounded(path, max_bytes=max_bytes)
        finally:
            _output_cap.reset(token)

    async def _stream_into_exec(
        self, *, cmd: list[str], stream: io.IOBase, error_path: Path, user: Any = None
    ) -> None:
        from agents.sandbox.errors import WorkspaceArchiveWriteError

        length, readable, spool = await asyncio.to_thread(_measure_stream, stream)
        try:
            if user is not None or length > _INLINE_STDIN_MAX:
                await super()._stream_into_exec(cmd=cmd, stream=readable, error_path=error_path, user=user)
                return
            payload = await asyncio.to_thread(readable.read, length)
            if isinstance(payload, str):
                payload = payload.encode()
            result, _ = await self._run(
                [str(c) for c in cmd],
                workdir=None,
                timeout=_FILE_OP_TIMEOUT_S,
                cap=self._limits.output_bytes,
                stdin=bytes(payload or b""),
                command_for_errors=tuple(cmd),
            )
        finally:
            if spool is not None:
                spool.close()
        if not result.ok():
            raise WorkspaceArchiveWriteError(
                path=error_path,
                context={
                    "command": [str(c) for c in cmd],
                    "exit_code": str(result.exit_code),
                    "stderr": result.stderr.decode("utf-8", errors="replace"),
                },
            )

    async def persist_workspace(self) -> io.IOBase:
        """`tar` the workspace inside the container, stream it out via `docker exec`, and rewrite it
        on the host the way the local backend archives: relative names, no root entry, only
        directories, regular files and symlinks, plain modes, bounded by Limits.workspace_size.

        The sandbox user owns every entry but has no capability to read past its own modes, so
        first it gives itself read access where sandbox code took it away (a `chmod 000` directory,
        catalogue ART-11), as the local backend's host-side archiver reads everything.
        (The SDK copies to /tmp and uses Docker's archive API, which cannot see tmpfs mounts.)"""
        root = self._workspace_root_path()
        excludes = [
            f"--exclude={root.name}/{rel.as_posix()}" for rel in sorted(self._persist_workspace_skip_relpaths())
        ]
        tar = ["tar", "-c", "-C", str(root.parent), "--anchored", "--no-wildcards", *excludes, root.name]
        cmd = ["sh", "-c", _READABLE_THEN_EXEC, "sh", str(root), *tar]
        try:
            raw = await asyncio.to_thread(self._exec_to_file, cmd)
        except docker.errors.APIError as e:  # the container is gone, or the engine is
            raise WorkspaceArchiveReadError(path=root, cause=e) from e
        try:
            return await asyncio.to_thread(_relative_archive, raw, root.name, self._limits.workspace_size)
        except (tarfile.TarError, ValueError) as e:
            raise WorkspaceArchiveReadError(path=root, cause=e) from e
        finally:
            raw.close()

    def _exec_to_file(self, cmd: list[str]) -> IO[bytes]:
        api = self._docker_client.api
        exec_id = api.exec_create(self.state.container_id, cmd, stdout=True, stderr=True)["Id"]
        out = tempfile.TemporaryFile()
        errors = bytearray()
        try:
            for stdout, stderr in api.exec_start(exec_id, stream=True, demux=True):
                if stdout:
                    out.write(stdout)
                if stderr and len(errors) < 65536:
                    errors += stderr
            code = api.exec_inspect(exec_id).get("ExitCode")
        except BaseException:
            out.close()
            raise
        if code not in (0, 1):  # GNU tar: 1 = a file changed while being read
            out.close()
            raise WorkspaceArchiveReadError(
                path=self._workspace_root_path(),
                context={"command": cmd, "exit_code": str(code), "stderr": errors.decode(errors="replace")},
            )
        out.seek(0)
        return out

    async def _shutdown_backend(self) -> None:
        if self._channel is not None:
            self._channel.close()
        await asyncio.to_thread(_remove_container, self._docker_client, self.state.container_id)


# `sh -c` script: $1 is the workspace, the rest the command to run after. find's `-exec ... \;`
# runs before find reads the directory, so it descends into what it has just unlocked; links are
# neither followed nor changed.
_READABLE_THEN_EXEC = (
    'root=$1; shift; find "$root" \\( -type d ! -perm -u=rx -exec chmod u+rx {} \\; \\)'
    ' -o \\( -type f ! -perm -u=r -exec chmod u+r {} \\; \\); exec "$@"'
)


def _relative_archive(raw: IO[bytes], prefix: str, max_bytes: int) -> IO[bytes]:
    out = tempfile.TemporaryFile()
    total = 0
    try:
        with tarfile.open(fileobj=raw, mode="r|") as src, tarfile.open(
            fileobj=out, mode="w", format=tarfile.PAX_FORMAT
        ) as dst:
            for member in src:
                name = member.name.rstrip("/")
                if not name.startswith(prefix + "/"):
                    continue  # the root entry itself
                member.name = name[len(prefix) + 1 :]
                member.uid = member.gid = 0
                member.uname = member.gname = ""
                member.mode &= 0o777
                if member.isdir():
                    member.mode |= 0o700
                    dst.addfile(member)
                elif member.issym():
                    dst.addfile(member)
                elif member.isreg():
                    total += member.size
                    if total > max_bytes:
                        raise ValueError(f"workspace archive is over {max_bytes} bytes")
                    dst.addfile(member, src.extractfile(member))
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def _remove_container(client: Any, container_id: str) -> None:
    """Kill and remove in one call: no `docker stop` grace period, nothing left behind."""
    try:
        client.api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:
        if e.status_code != 409:  # 409: removal already in progress
            raise


class CoderoomDockerClient(DockerSandboxClient):
    """The SDK's client with coderoom's container settings and session class."""

    def __init__(
        self, docker_client: Any, *, limits: Limits, instrumentation: Instrumentation | None = None
    ) -> None:
        super().__init__(docker_client, instrumentation=instrumentation)
        self._limits = limits
        self._seccomp_program: bytes | None = None

    def seccomp_program(self) -> bytes:
        """seccomp.py's program for the engine's CPU (DOCKER_HOST may be another machine)."""
        if self._seccomp_program is None:
            machine = str(self.docker_client.version().get("Arch", ""))
            arch = arch_named(machine)
            if arch is None:
                raise ValueError(f"no seccomp syscall table for the Docker engine's CPU ({machine!r})")
            self._seccomp_program = build_filter(arch)
        return self._seccomp_program

    def _wrap_session(
        self, inner: BaseSandboxSession, *, instrumentation: Instrumentation | None = None
    ) -> SandboxSession:
        # The SDK's create()/resume() construct DockerSandboxSession directly; re-class the fresh
        # instance (all its state kept) instead of copying those two long methods.
        if type(inner) is DockerSandboxSession:
            inner.__class__ = CoderoomDockerSession
            assert isinstance(inner, CoderoomDockerSession)
            inner._adopt(self._limits)
        return super()._wrap_session(inner, instrumentation=instrumentation)

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
        if not self.image_exists(image):
            raise ValueError(f"Docker image {image!r} not found; run `coderoom image build`")
        program = self.seccomp_program()
        limits = self._limits
        session = session_id or uuid.uuid4()
        environment = await manifest.environment.resolve()
        mount_opts = "rw,exec,nosuid,nodev"
        kwargs: dict[str, Any] = {
            "image": image,
            # The source travels in the environment so `ps` in the sandbox shows a short PID 1;
            # init.py drops the variable before it starts any command.
            "entrypoint": ["python3", "-I", "-S", "-c", _INIT_BOOTSTRAP],
            "command": ["--exit-on-eof", "--seccomp", f"--contact-within={CONTACT_WITHIN_S:g}"],
            "name": f"coderoom-{session.hex[:12]}",
            "hostname": "sandbox",
            # stdin closes when the host's attach connection drops, init.py then exits and the
            # daemon removes the container: a killed host leaves nothing behind (SES-04).
            # (docker-py sets StdinOnce from stdin_open only when detach is False; create() never
            # attaches by itself.)
            "detach": False,
            "stdin_open": True,
            "auto_remove": True,
            "tty": False,
            "init": False,
            "user": f"{SANDBOX_UID}:{SANDBOX_UID}",
            "environment": {
                **environment,
                "PYTHONNOUSERSITE": "1",
                "HOME": _NO_HOME,  # init.py gives each command its own
                _INIT_ENV: INIT_SOURCE,
                _SECCOMP_ENV: base64.b64encode(program).decode(),
            },
            "read_only": True,
            "tmpfs": {
                "/tmp": f"{mount_opts},size={limits.tmp_size},mode=1777",
                manifest.root: f"{mount_opts},size={limits.workspace_size},"
                f"uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0755",
            },
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],  # and Docker's default seccomp profile
            "network_mode": network_mode or "bridge",
            "mem_limit": limits.memory,
            "memswap_limit": limits.memory,
            "nano_cpus": int(limits.cpus * 1e9),
            "pids_limit": limits.pids,
            "ipc_mode": "private",
            "ulimits": [
                Ulimit(name="fsize", soft=limits.file_size, hard=limits.file_size),
                Ulimit(name="cpu", soft=limits.cpu_time, hard=limits.cpu_time),
                Ulimit(name="core", soft=0, hard=0),
                Ulimit(name="nofile", soft=_NOFILE, hard=_NOFILE),
            ],
            "shm_size": limits.tmp_size,
            "log_config": LogConfig(type="none"),
            "labels": {
                **(labels or {}),
                LABEL: "1",
                SESSION_LABEL: session.hex,
                CREATED_LABEL: datetime.now(UTC).isoformat(timespec="seconds"),
                **owner_labels(),
            },
        }
        if not limits.network:
            # Docker writes the host's resolvers into /etc/resolv.conf even with `network none`
            # (host layout disclosure, catalogue NET-03); a mount there makes it skip that.
            kwargs["mounts"] = [DockerMount("/etc/resolv.conf", "/dev/null", type="bind", read_only=True)]
        return self.docker_client.containers.create(**kwargs)
