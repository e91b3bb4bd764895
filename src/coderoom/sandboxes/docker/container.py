"""The docker sandbox core: a hardened container driven through docker-py alone (no Agents SDK).

* Container (`request.create_request`, the one body the CLI's fast path posts too): non-root,
  read-only root, tmpfs /tmp and workspace (sizes from Limits), all capabilities dropped,
  no-new-privileges, Docker's default seccomp profile, `network none`, or with network = true a
  network of the session's own whose routes reach neither the host nor private ranges
  (`network`: set before the first command), memory/CPU/pids/rlimits from Limits, no host
  environment, no logging of command output, labels for `coderoom sandbox prune`.
* PID 1 is inside/init.py (passed as the command, so any image with python3 in one of
  PYTHON_DIRS works; started by absolute path, whatever PATH the manifest sets). It stacks
  coderoom's seccomp filter (seccomp.py's program, for the engine's CPU) on Docker's before it
  runs anything, and runs commands sent over the container's attached stdin (`channel`): a fork
  instead of a `docker exec` (~50 ms of runc per call), with the local backend's rules
  (wall-clock deadline killing the whole tree, exit 124; bounded output; 137 on SIGKILL).
  stdin closing (the host died) ends PID 1, and the daemon removes the container; with a run
  bound (`keep_for_recovery`), only after a recovery window in which `rescue` can save it.
* Files: `read_file`/`write_file` run inside/files.py, never through a symlink: a read as a host
  helper (`helpers`: a uid sandbox code cannot signal, with a deadline), falling back to a
  command for a file only the sandbox's uid may read; a write as a command.
* Archive: init.py kills every other process in the container (by PID namespace, not by a pid
  file the sandbox could write), then runs inside/archiver.py in a forked child of itself: under
  the same seccomp filter, undumpable, refusing a workspace whose apparent size passes
  workspace_size before reading it. The host reads the stream with a byte budget and a deadline
  (`archive`). Docker's archive API is no alternative: it cannot see tmpfs mounts.
* Live processes (`start_process`: PTY sessions, the run_python kernel) are init.py jobs too,
  streaming their output and keeping stdin open (`live`), under the same rules and the wall
  clock from their start (none for the kernel).
* Allowlist (`limits.egress`): the container has `network none`; the session's egress proxy
  (`coderoom.egress`, the local backend's) listens on a socket in a host folder of its own
  (`egress`), bound read-only into the container, where init.py's forwarder relays
  127.0.0.1:3128 to it. The proxy starts before the first request reaches init.py and stops
  at close, when the folder is removed too.
* Close removes the container (`force`), which takes well under a second, then its network.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import IO, Any, cast

import docker.errors

from ...egress import session as egress_session
from ...errors import SandboxFailed, SandboxLimitExceeded
from ...hostile import snapshot as hostile_snapshot
from ...hostile.names import safe_relative_path, shown
from ..core import CommandResult
from ..limits import Limits
from ..live import MAX_LIVE_PROCESSES
from .archive import MAX_ENTRIES, ArchiveStream, clean_members, rewrite, stream_budget
from . import egress
from .channel import Channel, Reply
from .helpers import (
    SandboxReadTimeout, read_timeout_message, run_helper, sandbox_read_deadline, seconds_left, with_alarm,
)
from .live import DockerLive
from .network import confine, create_network, remove_network, session_network
from .request import (
    PYTHON,
    REPLY_SLACK_S,
    SANDBOX_UID,
    WORKSPACE,
    command_request,
    command_result,
    create_request,
    seccomp_for,
)

logger = logging.getLogger(__name__)

INSIDE = Path(__file__).with_name("inside")
FILES_SOURCE = (INSIDE / "files.py").read_text()
ARCHIVER_SOURCE = (INSIDE / "archiver.py").read_text()
HELPER_DEADLINE_S = (30.0, 600.0)  # a host helper's deadline: Limits.timeout, within these bounds
FILE_OP_TIMEOUT_S = 600.0  # reads, writes and unpacking: bounded by size, not by Limits.timeout
ARCHIVE_DEADLINE_S = 600.0  # the whole archive step, from killing processes to the last byte
QUIESCE_WAIT_S = 120.0  # init.py's kill passes are bounded at 20 x 5 s
WRITE_CHUNK = 8 * 1024**2  # one `write_file` command's stdin (the channel carries it in one line)
UNPACK_BATCH = 8 * 1024**2  # small files are unpacked by one `tar -x` per this many bytes
_FILES = (*PYTHON, "-I", "-S", "-c", FILES_SOURCE)


def seccomp_program(client: Any) -> bytes:
    """seccomp.py's program for the engine's CPU (DOCKER_HOST may be another machine)."""
    return seccomp_for(str(client.version().get("Arch", "")))


def create_container(client: Any, request: tuple[str, Mapping[str, Any]]) -> str:
    """Create the container of `request.create_request` (the same body the CLI's fast path
    posts) and return its id, creating the session's own network first when it has one (removed
    again if the container cannot be made)."""
    name, body = request
    network = body["HostConfig"]["NetworkMode"]
    if network == "none":
        return str(client.api.create_container_from_config(dict(body), name=name)["Id"])
    create_network(client, network, body["Labels"])
    try:
        return str(client.api.create_container_from_config(dict(body), name=name)["Id"])
    except BaseException:
        remove_network(client, network)
        raise


def new_egress_dir(limits: Limits) -> Path | None:
    """With an allowlist, a new folder for the proxy's socket (`egress.make`); else None."""
    return None if limits.egress is None else egress.make(SANDBOX_UID)


def remove_container(client: Any, container_id: str) -> None:
    """Kill and remove in one call: no `docker stop` grace period, nothing left behind."""
    try:
        client.api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:
        if e.status_code != 409:  # 409: removal already in progress
            raise


def _rewrite_and_close(stream: ArchiveStream, max_bytes: int, snapshot_root: str | None) -> IO[bytes]:
    """`archive.rewrite`; the stream drops what arrives after (the tar's end, or a failure)."""
    try:
        return rewrite(cast(IO[bytes], stream), max_bytes, snapshot_root=snapshot_root)
    finally:
        stream.close()


def stream_sink(stream: ArchiveStream, over: asyncio.Event) -> Any:
    """The channel sink for the archiver's "data" replies (called in the reader thread)."""
    loop = asyncio.get_running_loop()

    def sink(reply: Reply) -> None:
        if not stream.feed(base64.b64decode(reply["data"])):
            loop.call_soon_threadsafe(over.set)

    return sink


class DockerSandbox:
    """A started container (see the module docstring); implements `core.Sandbox`."""

    def __init__(
        self, client: Any, container_id: str, limits: Limits, *, root: str = WORKSPACE, egress_dir: Path | None = None
    ) -> None:
        """`egress_dir`: with an allowlist, the folder of the proxy's socket the container was
        made with (`egress.make`); this sandbox runs the proxy in it and removes it at close."""
        self.client = client
        self.container_id = container_id
        self.limits = limits
        self.root = root
        self._channel: Channel | None = None
        self._closed = False
        self._live: list[DockerLive] = []
        self._network: str | None = None  # the session's own network, once its routes are set
        self._confining = asyncio.Lock()
        self._egress_dir = egress_dir
        self._proxy: egress_session.EgressSession | None = None
        self._proxy_started = False
        if limits.egress is not None and egress_dir is not None:
            self._proxy = egress_session.EgressSession(
                limits.egress, egress.socket_of(egress_dir),
                max_bytes=limits.egress_bytes, max_connections=limits.egress_connections,
            )  # fmt: skip

    @classmethod
    async def create(cls, client: Any, *, image: str, limits: Limits) -> DockerSandbox:
        """Create, start and connect to a sandbox container; nothing is left if that fails."""
        egress_dir = await asyncio.to_thread(new_egress_dir, limits)
        try:
            program = await asyncio.to_thread(seccomp_program, client)
            request = create_request(limits, image=image, program=program, egress_dir=egress_dir)
            container_id = await asyncio.to_thread(create_container, client, request)
        except BaseException:
            if egress_dir is not None:
                await asyncio.shield(asyncio.to_thread(egress.remove, egress_dir))
            raise
        sandbox = cls(client, container_id, limits, egress_dir=egress_dir)
        try:
            await asyncio.to_thread(client.api.start, container_id)
            await asyncio.to_thread(sandbox.channel)
        except BaseException:
            await asyncio.shield(sandbox.close())
            raise
        return sandbox

    @property
    def closed(self) -> bool:
        """True once `close` began: the container is being or has been removed."""
        return self._closed

    def channel(self) -> Channel:
        """The command channel, attached on first use (and again if it dropped)."""
        if self._closed:
            raise SandboxFailed("the docker sandbox is closed")
        channel = self._channel
        if channel is None or channel.closed_reason is not None:
            channel = self._channel = Channel(self.client.api, self.container_id)
        return channel

    async def call(
        self, request: Reply, *, wait: float | None, reply_bytes: int, sink: Any = None, rid: str | None = None
    ) -> Reply:
        """One request to init.py and its final reply (see `channel`); SandboxFailed if the
        channel broke or the reply did not come within `wait` seconds."""
        return await self._call(request, wait=wait, reply_bytes=reply_bytes, sink=sink, rid=rid)

    async def _call(
        self, request: Reply, *, wait: float | None, reply_bytes: int, sink: Any = None, rid: str | None = None
    ) -> Reply:
        if self.limits.network and self._network is None:
            await self._confine_network()
        if self._proxy is not None and not self._proxy_started:
            await self._start_proxy()
        try:
            return await self.channel().call(request, wait=wait, reply_bytes=reply_bytes, sink=sink, rid=rid)
        except TimeoutError as e:
            raise SandboxFailed(f"the sandbox's init did not answer within {wait:g} s") from e
        except (ConnectionError, OSError, docker.errors.APIError) as e:
            raise SandboxFailed(f"the docker sandbox is unreachable: {e}") from e

    async def _confine_network(self) -> None:
        """Set the session network's prohibit routes (`network.confine`) before the first request
        reaches init.py; SandboxFailed (and no command runs) when they cannot be set."""
        async with self._confining:
            if self._network is None:
                try:
                    self._network = await asyncio.to_thread(confine, self.client, self.container_id, python=PYTHON)
                except (docker.errors.APIError, OSError) as e:
                    raise SandboxFailed(f"the sandbox's network routes could not be set: {e}") from e

    async def _start_proxy(self) -> None:
        """Start the egress proxy on its socket before the first request reaches init.py (whose
        forwarder connects to it for each connection); SandboxFailed if it cannot listen."""
        assert self._proxy is not None
        async with self._confining:
            if not self._proxy_started:
                roots = None
                if self._proxy.proxy.ca is not None:  # a secret: the bundle starts with the image's roots
                    from .roots import image_roots  # cryptography loads only for a session with secrets

                    roots = await asyncio.to_thread(image_roots, self.client, self.container_id)
                await self._proxy.start(system_roots=roots)
                self._proxy_started = True

    def watch_egress(self, listener: egress_session.EgressListener) -> None:
        """Hand each connection attempt through the proxy to `listener` (nothing without an allowlist)."""
        if self._proxy is not None:
            self._proxy.watch(listener)

    async def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int | None = None,
    ) -> CommandResult:
        """`core.Sandbox.exec`; `cwd` (default: the workspace) and `output_cap` (default:
        Limits.output_bytes, per stream) are for the SDK adapter and the file operations."""
        limit = self.limits.timeout
        return await self._command(
            argv, timeout=limit if timeout is None else min(timeout, limit), stdin=stdin, env=env,
            cwd=cwd, cap=output_cap or self.limits.output_bytes,
        )  # fmt: skip

    async def _command(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        cap: int,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        request = command_request(argv, cwd=cwd or self.root, timeout=timeout, cap=cap, stdin=stdin, env=env)
        reply = await self._call(request, wait=timeout + REPLY_SLACK_S, reply_bytes=2 * cap)
        return command_result(reply, timeout=timeout, limits=self.limits)

    # ------------------------------------------------------------------ live processes

    async def start_process(
        self, argv: Sequence[str], *, tty: bool, lifetime: float | None, channel_cap: int | None = None
    ) -> DockerLive:
        """A live job of init.py (a PTY session, the kernel; see `live`), in the workspace, with
        `lifetime` seconds of wall clock (None: none); SandboxFailed at MAX_LIVE_PROCESSES. With
        `channel_cap` its stdin is a pipe kept open and its output is kept up to that many bytes
        (the kernel's channel, `PtySessions.start_channel`)."""
        self._live = [process for process in self._live if process.alive]
        if len(self._live) >= MAX_LIVE_PROCESSES:
            raise SandboxFailed(f"{MAX_LIVE_PROCESSES} long-lived processes already run")
        request = {
            "argv": [str(a) for a in argv],
            "cwd": self.root,
            "timeout": lifetime,
            "limit": self.limits.output_bytes,
            "stdin": None if channel_cap is None else "",
            "live": True,
            "tty": tty,
        }
        wait = None if lifetime is None else lifetime + REPLY_SLACK_S
        process = DockerLive(self, request, tty=tty, lifetime=lifetime, wait=wait, cap=channel_cap)
        self._live.append(process)
        return process

    async def end_process(self, process: DockerLive) -> None:
        """Kill `process` (if it still runs) and forget it."""
        if process in self._live:
            self._live.remove(process)
        await process.kill()

    async def stop_processes(self) -> None:
        """Kill every live process."""
        processes, self._live = self._live, []
        await asyncio.gather(*(process.kill() for process in processes), return_exceptions=True)

    def helper_deadline(self) -> float:
        """Seconds a host helper may take: the command wall clock, within HELPER_DEADLINE_S."""
        low, high = HELPER_DEADLINE_S
        return min(high, max(low, self.limits.timeout))

    async def helper(self, argv: Sequence[str], *, cap: int, what: str) -> CommandResult:
        """Run a host helper (`helpers`: a uid sandbox code cannot signal, trace or stop; a
        deadline of `helper_deadline`, HelperTimeout past it). A leading "python3" is the
        image's (PYTHON), found whatever PATH the manifest set."""
        if argv and argv[0] == "python3":
            argv = [*PYTHON, *argv[1:]]
        deadline = self.helper_deadline()
        try:
            return await run_helper(
                self.client.api, self.container_id, with_alarm(PYTHON, argv, deadline), cwd=self.root,
                timeout=deadline, cap=cap, what=what,
            )  # fmt: skip
        except docker.errors.APIError as e:  # the container is gone, or the exec could not start
            raise SandboxFailed(f"{what} could not run in the docker sandbox: {e}") from e

    async def read_file(self, path: PurePosixPath, *, max_bytes: int, deadline: float | None = None) -> bytes:
        """A workspace file, read by a host helper; one that only the sandbox's uid may read
        (mode 0600, say) by a sandbox-uid command that must end by `deadline` (loop time: the
        whole read's, when the caller has more commands to run in it; default: this call's,
        `SANDBOX_UID_READ_S` from now), else SandboxReadTimeout."""
        rel = safe_relative_path(str(path))
        deadline = sandbox_read_deadline() if deadline is None else deadline
        argv = [*_FILES, "read", str(rel)]
        result = await self.helper(argv, cap=max_bytes + 1, what=f"reading {shown(rel)}")
        if result.exit_code == 3 and b"Permission denied" in result.stderr:
            what = f"{shown(rel)} (readable by the sandbox's user only)"
            result = await self._command(argv, timeout=seconds_left(deadline, what), cap=max_bytes + 1)
            if result.timed_out:
                raise SandboxReadTimeout(read_timeout_message(what))
        if result.exit_code == 2:
            raise FileNotFoundError(f"{shown(rel)}: no such file in the workspace")
        if not result.ok:
            raise OSError(f"{shown(rel)}: {result.stderr[-500:].decode(errors='replace').strip()}")
        if len(result.stdout) > max_bytes:
            raise OverflowError(f"{shown(rel)}: over the {max_bytes} byte read limit")
        return result.stdout

    async def write_file(self, path: PurePosixPath, data: bytes | IO[bytes], *, exclusive: bool = False) -> None:
        """Create or replace a workspace file, never through a symlink (inside/files.py); with
        `exclusive`, FileExistsError when the name exists as anything (apply_patch's "Add File")."""
        rel = safe_relative_path(str(path))
        source = io.BytesIO(data) if isinstance(data, bytes | bytearray) else data
        mode = "create" if exclusive else "write"
        while True:
            chunk = await asyncio.to_thread(source.read, WRITE_CHUNK)
            if isinstance(chunk, str):
                chunk = chunk.encode()
            if not chunk and mode == "append":
                return
            result = await self._command(
                [*_FILES, mode, str(rel)], timeout=FILE_OP_TIMEOUT_S, cap=4096, stdin=bytes(chunk)
            )
            if result.exit_code == 4 and mode == "create":
                raise FileExistsError(f"{shown(rel)}: exists in the workspace")
            if not result.ok:
                raise OSError(f"{shown(rel)}: {result.stderr[-500:].decode(errors='replace').strip()}")
            if not chunk:
                return
            mode = "append"

    async def quiesce(self) -> int:
        """Kill every process in the container but init.py; how many there were."""
        reply = await self._call({"op": "quiesce"}, wait=QUIESCE_WAIT_S, reply_bytes=4096)
        if "error" in reply:
            raise SandboxFailed(f"could not stop the sandbox's processes: {reply['error']}")
        return int(reply["killed"])

    def keep_for_recovery(self, window: float) -> None:
        """Have init.py outlive a lost host by `window` seconds (a run is bound: `bindings`):
        every other process killed, the workspace kept for `rescue` to save. SandboxFailed if
        init.py cannot be reached."""
        try:
            self.channel().notify({"op": "keep", "window": window})
        except (ConnectionError, OSError, docker.errors.APIError) as e:
            raise SandboxFailed(f"the docker sandbox is unreachable: {e}") from e

    def archive_request(self, *, skip: Iterable[PurePosixPath] = (), snapshot: bool = False) -> Reply:
        """init.py's request to run the archiver over the workspace (see `archive`)."""
        return {
            "op": "helper",
            "source": ARCHIVER_SOURCE,
            "timeout": ARCHIVE_DEADLINE_S,
            "args": {
                "root": self.root,
                "skip": sorted(p.as_posix() for p in skip),
                "max_bytes": self.limits.workspace_size,
                "max_entries": MAX_ENTRIES,
                "hard_links": snapshot,
            },
        }

    async def archive(self, *, skip: Iterable[PurePosixPath] = (), snapshot: bool = False) -> IO[bytes]:
        """A tar of the workspace: every process is killed first; bounded by workspace_size in
        bytes (apparent sizes, so sparse files count in full) and by ARCHIVE_DEADLINE_S. A
        `snapshot` (for `restore_snapshot`) keeps hard links and makes absolute symlinks under
        the workspace relative."""
        max_bytes = self.limits.workspace_size
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ARCHIVE_DEADLINE_S
        stream = ArchiveStream(stream_budget(max_bytes, MAX_ENTRIES))
        over = asyncio.Event()
        request = self.archive_request(skip=skip, snapshot=snapshot)
        root = self.root if snapshot else None
        rewriting = asyncio.ensure_future(asyncio.to_thread(_rewrite_and_close, stream, max_bytes, root))
        try:
            await self._run_archiver(request, stream, over, deadline - loop.time())
        except BaseException:
            stream.fail(stream.error or "the archive step failed")
            for done in await asyncio.gather(rewriting, return_exceptions=True):
                if not isinstance(done, BaseException):
                    done.close()
            raise
        try:
            out = await asyncio.wait_for(rewriting, max(1.0, deadline - loop.time()))
        except TimeoutError:
            stream.fail(f"it took longer than its {ARCHIVE_DEADLINE_S:g} s deadline")
            raise SandboxLimitExceeded(f"workspace archive refused: {stream.error}") from None
        if stream.error is not None:  # the tar ended, but the stream went on past its budget
            out.close()
            raise SandboxLimitExceeded(f"workspace archive refused: {stream.error}")
        return out

    async def _run_archiver(self, request: Reply, stream: ArchiveStream, over: asyncio.Event, wait: float) -> None:
        """Run the archiver until it ends, the stream passes its budget, or `wait` runs out;
        then end or fail the stream. A helper still running is killed."""
        helper = asyncio.ensure_future(
            self._call(request, wait=wait + REPLY_SLACK_S, reply_bytes=1 << 17, sink=stream_sink(stream, over))
        )
        overflow = asyncio.ensure_future(over.wait())
        try:
            await asyncio.wait({helper, overflow}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        finally:
            overflow.cancel()
        if helper.done():
            self._check_helper(helper.result(), stream)
            stream.end()
            return
        helper.cancel()
        stream.fail(stream.error or f"it took longer than its {ARCHIVE_DEADLINE_S:g} s deadline")
        await self.quiesce()

    @staticmethod
    def _check_helper(reply: Reply, stream: ArchiveStream) -> None:
        """Fail the stream (so `rewrite` raises) unless the archiver ended cleanly."""
        if "error" in reply:
            stream.fail(f"the archiver could not start: {reply['error']}")
        elif reply.get("timed_out"):
            stream.fail(f"it took longer than its {ARCHIVE_DEADLINE_S:g} s deadline")
        elif int(reply.get("code", 1)) != 0:
            stderr = base64.b64decode(reply.get("err", ""))[-1000:].decode(errors="replace").strip()
            stream.fail(stderr.removeprefix("workspace archive refused: ") or f"archiver exit {reply.get('code')}")

    async def hydrate(self, tar: IO[bytes]) -> None:
        """Unpack `tar` (directories, regular files, symlinks that stay inside; see
        `archive.clean_members`): small files in batches through `tar -x`, large ones by chunks."""
        batch = io.BytesIO()
        packer = tarfile.open(fileobj=batch, mode="w", format=tarfile.PAX_FORMAT)
        members = clean_members(tar, self.limits.workspace_size)
        while (item := await asyncio.to_thread(next, members, None)) is not None:
            member, data = item
            if data is not None and member.size > UNPACK_BATCH:
                await self._unpack(packer, batch)
                batch = io.BytesIO()
                packer = tarfile.open(fileobj=batch, mode="w", format=tarfile.PAX_FORMAT)
                await self.write_file(PurePosixPath(member.name), data)
                continue
            packer.addfile(member, data)
            if batch.tell() > UNPACK_BATCH:
                await self._unpack(packer, batch)
                batch = io.BytesIO()
                packer = tarfile.open(fileobj=batch, mode="w", format=tarfile.PAX_FORMAT)
        await self._unpack(packer, batch)

    async def restore_snapshot(self, tar: IO[bytes]) -> None:
        """Restore a snapshot exactly (`hostile.snapshot`: modes, hard links, in-workspace
        symlinks): checked whole on the host before anything is sent, then unpacked inside the
        container by `tar -x` in clean batches, symlinks last (a large file goes by
        `write_file`, its mode set after). SnapshotRefused names the member and the reason."""
        checked = await asyncio.to_thread(hostile_snapshot.check, tar, max_bytes=self.limits.workspace_size)
        try:
            await self.restore_checked(checked)
        finally:
            checked.close()

    async def restore_checked(self, checked: hostile_snapshot.Snapshot) -> None:
        """Unpack a snapshot `hostile_snapshot.check` accepted (see `restore_snapshot`)."""
        modes: dict[int, list[str]] = {}
        batch, packer = io.BytesIO(), None
        for info, data in hostile_snapshot.members_of(checked):
            if data is not None and info.size > UNPACK_BATCH:
                if packer is not None:
                    await self._unpack(packer, batch, keep_modes=True)
                    batch, packer = io.BytesIO(), None
                await self.write_file(PurePosixPath(info.name), data)
                modes.setdefault(info.mode, []).append(info.name)
                continue
            packer = packer or tarfile.open(fileobj=batch, mode="w", format=tarfile.PAX_FORMAT)
            await asyncio.to_thread(packer.addfile, info, data)
            if batch.tell() > UNPACK_BATCH:
                await self._unpack(packer, batch, keep_modes=True)
                batch, packer = io.BytesIO(), None
        if packer is not None:
            await self._unpack(packer, batch, keep_modes=True)
        for mode, names in modes.items():
            result = await self._command(["chmod", f"{mode:o}", "--", *names], timeout=FILE_OP_TIMEOUT_S, cap=65536)
            if not result.ok:
                raise SandboxFailed(f"restoring file modes failed: {result.stderr[-500:].decode(errors='replace')}")

    async def _unpack(self, packer: tarfile.TarFile, batch: io.BytesIO, *, keep_modes: bool = False) -> None:
        packer.close()
        if batch.tell() <= 2 * tarfile.BLOCKSIZE:  # only the end-of-archive blocks
            return
        argv = ["tar", "-x", "-f", "-", "--no-same-owner", "-p" if keep_modes else "--no-same-permissions"]
        result = await self._command(argv, timeout=FILE_OP_TIMEOUT_S, cap=65536, stdin=batch.getvalue())
        if not result.ok:
            raise SandboxFailed(f"unpacking into the workspace failed: {result.stderr[-500:].decode(errors='replace')}")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._channel is not None:
            self._channel.close()
        network = self._network
        if self.limits.network and network is None:
            network = await asyncio.to_thread(self._network_of_container)
        await asyncio.to_thread(remove_container, self.client, self.container_id)
        if network is not None:
            await asyncio.to_thread(remove_network, self.client, network)
        if self._proxy is not None:
            await self._proxy.close()
        if self._egress_dir is not None:
            await asyncio.to_thread(egress.remove, self._egress_dir)

    def _network_of_container(self) -> str | None:
        """The session network of a container closed before its first command (None if gone)."""
        try:
            return session_network(self.client.api.inspect_container(self.container_id))[0]
        except (docker.errors.NotFound, SandboxFailed):
            return None
