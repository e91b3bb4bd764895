"""Saving the workspace of a Docker session whose owner died (kill -9, an OOM kill), issue 20.

While a run is bound to a session (`bindings`), its init.py has been told to outlive a lost host
(the "keep" operation): when the attach connection drops it kills every other process in the
container, as before an archive, and waits `bindings.recovery_window()` seconds (600 s by
default) before it exits and the engine removes the container (AutoRemove stays on, so the
container cannot outlast that bound even if no coderoom process ever comes back). Recovery
(`coderoom.recovery`) saves it within that window through `RescuedWorkspace`, which gives
`artifacts.save_workspace` what it uses of a session (`pty_terminate_all`, `persist_workspace`),
then removes the container.

The way back in is a `docker exec` of init.py itself with --archive-once, running the very
archiver source and request a normal close runs as init.py's helper. Why this one: stdin cannot
be reattached (`StdinOnce`: init.py's EOF is how a dead host is seen, and a stdin kept open would
hide it), and an exec'd process, unlike init.py's forked helper, does not inherit PID 1's
stacked seccomp filter or its undumpable flag; run as init.py with --archive-once it installs the
same filter first (and refuses to archive without it), marks itself undumpable, runs only once
PID 1 has taken the name "coderoom-kept" (it does once every other process is dead; no other
process can rename it; the host waits for it by the engine's `top`), refuses to run beside any
process but PID 1 (all were killed: nobody is left to race it or trace it), and is
ended by SIGALRM at the archive deadline; the loader's variables a manifest may have set are
blanked (`helpers.exec_environment`), so no library the sandbox wrote loads first. It runs as
the sandbox's uid, as the helper does, to
read (and unlock, ART-11) everything the sandbox wrote. So it is the archive helper in another
process: same seccomp, same container limits (its cgroup, rlimits, no capabilities,
no-new-privileges), the same byte budget (`archive.stream_budget`, the archiver's apparent-size
check) and deadline (`container.ARCHIVE_DEADLINE_S`) on the host. Nothing the sandbox wrote
chooses anything here: the limits are the caller's, the container and its workspace root come
from the host's binding record.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, Any

import docker.errors
from agents.sandbox.errors import WorkspaceArchiveReadError

from ...errors import CoderoomError
from ...hostile.names import shown
from ..limits import Limits
from ..orphans import WorkspaceLost
from .archive import ArchiveStream
from .channel import Reply
from .container import ARCHIVE_DEADLINE_S, QUIESCE_WAIT_S, DockerSandbox, remove_container, seccomp_program
from .helpers import REPLY_SLACK_S, exec_environment
from .request import INIT_BOOTSTRAP, INIT_ENV, INIT_SOURCE, PYTHON, SANDBOX_UID, SECCOMP_ENV

ARCHIVE_ENV = "CODEROOM_ARCHIVE"  # init.py's ARCHIVE_ENV
KEPT_NAME = "coderoom-kept"  # init.py's KEPT_NAME: its name once it waits for a recovery
MAX_STDERR = 65536


class RescuedSandbox(DockerSandbox):
    """A container whose owner died, in its recovery window: only its archive is used, run by
    `docker exec` (module docstring) instead of over the lost channel."""

    async def _run_archiver(self, request: Reply, stream: ArchiveStream, over: asyncio.Event, wait: float) -> None:
        if not await self._kept(min(wait, QUIESCE_WAIT_S)):
            stream.fail(f"its init did not finish killing the container's processes within {QUIESCE_WAIT_S:g} s")
            return
        program = base64.b64encode(await asyncio.to_thread(seccomp_program, self.client)).decode()
        environment = {
            INIT_ENV: INIT_SOURCE,
            SECCOMP_ENV: program,
            ARCHIVE_ENV: json.dumps({key: request[key] for key in ("source", "args", "timeout")}),
        }
        try:
            reply = await asyncio.wait_for(
                asyncio.to_thread(self._exec_archiver, environment, stream), wait + REPLY_SLACK_S
            )
        except TimeoutError:
            stream.fail(stream.error or f"it took longer than its {ARCHIVE_DEADLINE_S:g} s deadline")
            return  # the archiver's own alarm ends it; the container is removed after
        self._check_helper(reply, stream)
        stream.end()

    async def _kept(self, wait: float) -> bool:
        """Wait (up to `wait` s) until init.py waits for a recovery: its name is KEPT_NAME, which
        it takes once every other process is dead (the engine's `top`: nothing runs in the
        container for it). An exec started before that could be killed by its kill passes.
        Only PID 1's row counts (the engine's State.Pid, a host pid as `top` lists): any sandbox
        process can give itself that name while PID 1 is still attached or killing."""
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            init = await asyncio.to_thread(self.client.api.inspect_container, self.container_id)
            top = await asyncio.to_thread(self.client.api.top, self.container_id, ps_args="-o pid,comm")
            pid = str((init.get("State") or {}).get("Pid"))
            if any(row[0] == pid and row[-1] == KEPT_NAME for row in top.get("Processes") or []):
                return True
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.2)

    def _exec_archiver(self, environment: dict[str, str], stream: ArchiveStream) -> Reply:
        """The exec, its stdout fed to `stream` (stopped once past its budget), its stderr kept
        up to MAX_STDERR; a reply shaped like init.py's helper reply."""
        api = self.client.api
        argv = [*PYTHON, "-I", "-S", "-c", INIT_BOOTSTRAP, "--seccomp", "--archive-once"]
        created = api.exec_create(
            self.container_id, argv, user=f"{SANDBOX_UID}:{SANDBOX_UID}", workdir="/",
            environment=exec_environment(environment),
            stdout=True, stderr=True, stdin=False, tty=False,
        )  # fmt: skip
        err = bytearray()
        output = api.exec_start(created["Id"], stream=True, demux=True)
        try:
            for out, more in output:
                if out and not stream.feed(out):
                    break
                if more and len(err) < MAX_STDERR:
                    err += more[: MAX_STDERR - len(err)]
        finally:
            close = getattr(output, "close", None)
            if close is not None:
                close()
        if stream.error is not None:
            return {"code": 1, "err": ""}
        code = api.exec_inspect(created["Id"]).get("ExitCode")
        code = 1 if code is None else int(code)
        return {"code": code, "timed_out": code == 128 + signal.SIGALRM, "err": base64.b64encode(bytes(err)).decode()}


class RescuedWorkspace:
    """What `artifacts.save_workspace` uses of a session, over a `RescuedSandbox`."""

    def __init__(self, sandbox: RescuedSandbox) -> None:
        self.sandbox = sandbox

    async def pty_terminate_all(self) -> None:
        """Nothing runs: init.py killed every process when its host went away."""

    async def persist_workspace(self) -> IO[bytes]:
        """The archive (a snapshot, as a session's `persist_workspace`), or
        WorkspaceArchiveReadError saying why not (the save then names it)."""
        try:
            return await self.sandbox.archive(snapshot=True)
        except CoderoomError as e:
            raise WorkspaceArchiveReadError(path=self.sandbox.root, cause=e) from e  # type: ignore[arg-type]


def _state(client: Any, container: str) -> str | None:
    """Why `container` cannot be saved from (gone, not running, paused), or None."""
    try:
        state = client.api.inspect_container(container).get("State") or {}
    except docker.errors.NotFound:
        return "it is gone (its recovery window had passed, or it stopped)"
    if state.get("Paused"):
        return "it is paused (frozen past any window it had)"
    if not state.get("Running"):
        return f"it is not running ({shown(str(state.get('Status')), 40)})"
    return None


async def remove(container: str) -> None:
    """Remove `container` (`Orphan.discard`: its owner's own save had finished)."""
    from .image import docker_client

    client = docker_client()
    try:
        await asyncio.to_thread(remove_container, client, container)
    finally:
        client.close()


@asynccontextmanager
async def reopen(container: str, root: str, limits: Limits, *, remove_on_failure: bool) -> AsyncIterator[Any]:
    """`orphans.Orphan.reopen` for a bound container whose owner died: the workspace to save
    (`RescuedWorkspace`), the container removed afterwards (after a failed save only with
    `remove_on_failure`; else it ends by itself at its window's end). WorkspaceLost when it
    cannot be reached: it is removed, and the loss says why."""
    from .image import docker_client

    client = docker_client()
    try:
        problem = await asyncio.to_thread(_state, client, container)
        if problem is not None:
            await asyncio.to_thread(remove_container, client, container)
            raise WorkspaceLost(
                f"Docker container {shown(container[:12], 20)}, whose tmpfs held it, cannot be saved from: {problem}; "
                "the record up to the kill is kept"
            )
        sandbox = RescuedSandbox(client, container, limits, root=root)
        saved = False
        try:
            yield RescuedWorkspace(sandbox)
            saved = True
        finally:
            if saved or remove_on_failure:
                await asyncio.shield(asyncio.to_thread(remove_container, client, container))
    finally:
        client.close()
