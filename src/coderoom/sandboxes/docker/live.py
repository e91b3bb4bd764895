"""A live (PTY) process in a Docker sandbox: a job of init.py (PID 1), never a `docker exec`.

It runs the way every command of the container runs (a fork of init.py: its stacked seccomp
filter, the container's memory, pids and network settings, a fresh HOME, its whole tree killed
when it ends) with two differences: its output comes to the host as it is written, as "data"
replies kept bounded here (`live.LiveOutput`), and its stdin stays open for `write`. With `tty`
it runs on a pseudo-terminal init.py opens in the container's own devpts. Its wall clock is
init.py's deadline for the job (exit 124), so a host that stops polling does not lengthen it;
none only for the run_python kernel (`lifetimes`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import SandboxFailed
from ..base import EXIT_TIMEOUT
from ..lifetimes import wall_clock_note, wall_clock_stop
from ..live import LiveOutput
from ..stops import named_stop
from .channel import Reply

if TYPE_CHECKING:
    from ..limits import Limits


class Caller(Protocol):
    """What a live job needs of its sandbox (`container.DockerSandbox`, which imports this module
    to start one): its limits and one request to init.py."""

    limits: Limits

    async def call(
        self, request: Reply, *, wait: float | None, reply_bytes: int, sink: Any = None, rid: str | None = None
    ) -> Reply: ...

STDIN_WRITE_S = 5.0  # how long init.py may take to accept input for a live job
CONTROL_WAIT_S = 10.0  # for init.py's answer to a stdin or kill request
LOST = 125  # the exit code reported when the channel to init.py broke under the process
_DATA_LINE = 1 << 17  # the payload of one "data" reply (init.py sends at most 64 KiB of output)


class DockerLive:
    def __init__(
        self, sandbox: Caller, request: Reply, *, tty: bool, lifetime: float | None, wait: float | None,
        cap: int | None = None,
    ) -> None:
        """Send `request` (a live job for init.py); `wait`: how long its final reply may take.
        `cap`: a channel's (its stdin a pipe, its output kept up to `cap` bytes)."""
        self.tty = tty
        self._takes_input = tty or cap is not None
        self.stopped_by: str | None = None
        self._sandbox = sandbox
        self._rid = uuid.uuid4().hex
        self._lifetime = lifetime
        self._output = LiveOutput(cap or sandbox.limits.output_bytes)
        self._exit: int | None = None
        loop = asyncio.get_running_loop()

        def sink(reply: Reply) -> None:  # in the channel's reader thread; the reply is hostile
            try:
                chunk = base64.b64decode(str(reply["data"]), validate=True)
            except (binascii.Error, ValueError):
                return
            loop.call_soon_threadsafe(self._output.keep, chunk)

        self._sent = asyncio.Event()
        self._task = asyncio.ensure_future(self._run(request, wait, sink))
        self._task.add_done_callback(self._ended)

    async def _run(self, request: Reply, wait: float | None, sink: Any) -> Reply:
        self._sent.set()  # the call's first step, which follows at once, sends the request
        return await self._sandbox.call(request, wait=wait, reply_bytes=_DATA_LINE, sink=sink, rid=self._rid)

    @property
    def alive(self) -> bool:
        return not self._output.closed.is_set()

    @property
    def exit_code(self) -> int | None:
        return None if self.alive else self._exit

    def _ended(self, task: asyncio.Task[Reply]) -> None:
        """The job's final reply: its exit code and, if a limit ended it, which."""
        if task.cancelled():
            self._exit = LOST
        elif (error := task.exception()) is not None:
            self._exit = LOST
            self._output.note(str(getattr(error, "message", error)))
        else:
            self._finish(task.result())
        self._output.closed.set()

    def _finish(self, reply: Reply) -> None:
        if "error" in reply:  # it could not start: the pids limit, an archive under way
            self._exit = 126
            self._output.note(f"could not start the command: {str(reply['error'])[:500]}")
            return
        code = reply.get("code")
        self._exit = code if isinstance(code, int) and 0 <= code < 256 else LOST
        if reply.get("timed_out") is True and self._lifetime is not None:
            self._exit = EXIT_TIMEOUT
            self.stopped_by = wall_clock_stop(self._lifetime)
            self._output.note(wall_clock_note(self._lifetime))
        elif reply.get("oom_killed") is True:
            self.stopped_by = named_stop(self._exit, b"", self._sandbox.limits, oom_killed=True)
            if self.stopped_by:
                self._output.note(self.stopped_by)

    async def collect(self, wait_s: float) -> tuple[bytes, bool]:
        return await self._output.collect(wait_s)

    async def collect_any(self) -> tuple[bytes, bool]:
        return await self._output.collect_any()

    async def write(self, data: bytes) -> None:
        """Queue `data` for its stdin (its terminal, with tty; a pipe for a channel) in init.py;
        refused input is noted."""
        if not self._takes_input or not self.alive:
            return
        request = {"op": "stdin", "job": self._rid, "data": base64.b64encode(data).decode()}
        try:
            reply = await self._sandbox.call(request, wait=STDIN_WRITE_S, reply_bytes=len(data) + 4096)
        except (TimeoutError, SandboxFailed) as exc:
            self._output.note(f"input not delivered: {exc}")
            return
        if "error" in reply and self.alive:
            self._output.note(f"input not delivered: {str(reply['error'])[:500]}")

    async def kill(self) -> None:
        """Kill its whole tree (init.py's kill_job_tree) and wait, bounded, for its end."""
        if self.alive:
            # after its start request: a kill sent first finds no job, and the job then starts
            # out of reach (SVC-P1: a session ended to make room right after it was started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sent.wait(), CONTROL_WAIT_S)
            with contextlib.suppress(TimeoutError, SandboxFailed):
                await self._sandbox.call({"op": "kill", "job": self._rid}, wait=CONTROL_WAIT_S, reply_bytes=4096)
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._task), CONTROL_WAIT_S)
        if not self._task.done():
            self._task.cancel()
