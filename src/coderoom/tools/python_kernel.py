"""`run_python`: a persistent Python kernel per sandbox session, so an analysis step does not pay
for a new interpreter, the imports and the data load every time.

The kernel (`kernel_server.py`) runs inside the sandbox and is reached only through the session
API: over a channel kept open for the session where the backend has one (`kernel_channel`: no
sandbox command per cell), else by one small sandbox command per cell through FIFOs, so it works
the same on every backend. The tool result is text (stdout, stderr, the last
value, the traceback, what happened to the kernel) plus one image per matplotlib figure when the
model accepts images. The run record gets the same cell as structure (`cell_record`, a
`record.events.Cell`): the tool keeps it by call id until the recording hook takes it (the tool
is a `record.hooks.KeepsCells`), so no reader ever parses the prose back.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from agents.sandbox.capabilities import Capability
from agents.sandbox.errors import ExecTimeoutError
from agents.sandbox.manifest import Manifest
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.tool import FunctionTool, Tool, ToolOutputImage, ToolOutputText
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidatorFunctionWrapHandler, field_validator

from ..record.events import FIGURE_PATH, Cell, CellTable, cell_status_text
from ..record.hooks import KeepsCells
from ..sandboxes.lifetimes import LIVES_WITH_SESSION
from ..sandboxes.sdk_session_adapter import backend_session
from ..record.writer import bounded
from .bounded import OutputBound, bound_tool
from .inside import kernel_server
from .kernel_channel import ChannelClosed, Channels, KernelChannel

TOOL_NAME = "run_python"
KERNEL_DIR = kernel_server.KERNEL_DIR
MAX_CODE_BYTES = 4 * 1024 * 1024
MAX_ARGV_PAYLOAD = 100_000  # bytes; Linux allows 128 KiB per argument, larger requests go by file
MAX_IMAGE_BYTES = 5 * 1024 * 1024
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
START_WAIT_S = 30.0
PING_ACK_S = 0.5  # `answers`: an idle kernel acks within milliseconds
FIGURES_LINE = "figures: "
KEPT_CELLS = 64  # cells waiting for the recording hook; more means no hook is taking them
RELAY_MARGIN_S = 1.0  # between the kernel's reply to an interrupted cell and the wall clock
INTERRUPT_GRACE_S = kernel_server.GRACE_S  # a cancelled cell that ignores SIGINT this long is killed

# Without a channel, one bash process per cell: ~2 ms, where `python3 -c` to relay would cost
# ~12 ms. After the ack the client reads through a read-only descriptor, so the supervisor's
# death shows as EOF at once.
# Exit 3: no kernel answers (start one); 4: request not written; 5: no reply in time; 6: the
# kernel went away during the cell.
CLIENT = r"""
d=.coderoom/kernel
own=
fail() { [ -z "$own" ] || rm -f "$d/req-$1.json"; exit "$2"; }
[ -p "$d/req" ] && [ -p "$d/resp" ] || exit 3
if [ -n "$2" ]; then own=1; printf '%s' "$2" > "$d/req-$1.json" || fail "$1" 4; fi
exec 3<>"$d/req" 4<>"$d/resp" || fail "$1" 3
printf 'run %s\n' "$1" >&3
line=
while IFS= read -r -t "${4:-3}" line <&4; do [ "$line" = "ack $1" ] && break; done
[ "$line" = "ack $1" ] || fail "$1" 3
exec 5<"$d/resp" 4<&- 3>&-
while :; do
  IFS= read -r -t "$3" line <&5
  rc=$?
  [ "$rc" -gt 128 ] && exit 5
  [ "$rc" -eq 0 ] || exit 6
  [ "$line" = "done $1" ] && exec cat "$d/resp-$1.json"
done
"""

LOST = (
    "the Python kernel had stopped, so a new one was started: variables from earlier cells are "
    "gone (re-run imports and data loading)"
)
NO_PROCESSES = (
    "this sandbox backend cannot keep a process running between commands (its session has no "
    "pty_exec_start), so run_python is unavailable here: use exec_command"
)
VANISHED = (
    "the kernel went away during this cell (was it killed from the shell?); a new one starts "
    "on the next call"
)
START = 'rm -f .coderoom/kernel/req .coderoom/kernel/resp; exec "$@"'
# O_RDWR: never blocks, even when no supervisor holds the FIFO (the line is then simply lost)
INTERRUPT = r'[ -p .coderoom/kernel/req ] || exit 3; exec 3<>.coderoom/kernel/req; printf "interrupt %s\n" "$1" >&3'

DESCRIPTION = (
    "Run Python code in a persistent kernel inside the sandbox (working directory: the workspace "
    "root). Variables, imports and loaded data persist between calls, like notebook cells: load "
    "data once, then explore it in later calls. Returns stdout, stderr, the value of the last "
    "expression (a DataFrame as a table preview) and the traceback on error. Every open "
    "matplotlib figure is shown to you after the cell and then closed; save a figure you need "
    "as a file with fig.savefig('output/....png'). A call is interrupted after {timeout:g} s. "
    "The shell (exec_command) stays available."
)

INSTRUCTIONS = (
    "Use `run_python` for data analysis: it keeps a live Python session, so load the data once "
    "and reuse the variables in later calls instead of re-running scripts."
)


def cell_timeout(wall_clock: float) -> float:
    """The kernel's per-cell timeout under a sandbox's per-command wall clock (`Limits.timeout`).

    Without a channel each cell is relayed by one sandbox command, which the wall clock kills; a
    relay killed before the kernel interrupted the cell and replied is taken for a lost kernel
    (its variables gone). So the cell is interrupted GRACE_S + RELAY_MARGIN_S before the wall
    clock, or at half of it when the wall clock is shorter than that; over a channel nothing
    kills the relay, and the same limit keeps a cell's time the same on every backend."""
    room = wall_clock - kernel_server.GRACE_S - RELAY_MARGIN_S
    return room if room >= wall_clock / 2 else wall_clock / 2


def kernel_source() -> str:
    """The in-sandbox program, as shipped in the package."""
    return files("coderoom.tools.inside").joinpath("kernel_server.py").read_text(encoding="utf-8")


def keeps_processes(session: BaseSandboxSession) -> bool:
    """Whether the backend can keep a process alive between commands (implements the PTY API)."""
    return type(backend_session(session)).pty_exec_start is not BaseSandboxSession.pty_exec_start


class RunPythonArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str = Field(description="Python source to run in the kernel.")


class Figure(BaseModel):
    path: str
    width: int = 0
    height: int = 0
    description: str = ""


class CellReply(BaseModel):
    """What the supervisor wrote: untrusted (the sandbox can write anything), so validated."""

    model_config = ConfigDict(extra="ignore")
    status: Literal["ok", "error", "interrupted", "restarted", "crashed", "bad_request"]
    cell: int | None = None
    stdout: str = ""
    stderr: str = ""
    value: str | None = None
    table: CellTable | None = None
    error: str | None = None
    # the kernel saves at most MAX_FIGURES; a reply listing more was forged (each is a file read)
    figures: list[Figure] = Field(default_factory=list, max_length=kernel_server.MAX_FIGURES)
    duration_s: float | None = None
    timed_out: float | None = None
    interrupted_on_request: bool = False
    state_lost: bool = False
    detail: str = ""

    @field_validator("table", mode="wrap")
    @classmethod
    def _table_or_none(cls, value: object, handler: ValidatorFunctionWrapHandler) -> CellTable | None:
        """A table out of bounds was not the kernel's: dropped, the rest of the reply kept (the
        value's text preview still says what it was)."""
        try:
            table: CellTable | None = handler(value)
        except ValidationError:
            return None
        return table


class KernelError(RuntimeError):
    """The kernel could not be reached or started; the message says what happened."""


@dataclass
class CellResult:
    """One executed cell, as the tool saw it."""

    reply: CellReply
    cell: int
    notes: list[str] = field(default_factory=list)

    @property
    def figures(self) -> list[Figure]:
        return [f for f in self.reply.figures if FIGURE_PATH.match(f.path)]


@dataclass
class _KernelState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    started: bool = False
    loss_reported: bool = False
    cells: int = 0
    running: str | None = None  # the relay id of the cell in flight, for `interrupt`
    # a cancelled cell being interrupted and waited for: the next cell starts after it
    finishing: asyncio.Task[None] | None = None
    cancelled_note: str | None = None  # what became of a cancelled cell, told with the next cell
    channel: KernelChannel | None = None  # the running kernel's channel; None: it uses the FIFOs
    warming: bool = False  # `warm`'s cell runs: no cell of the session's, nothing to interrupt
    waiting: int = 0  # cells waiting for the lock: `warm` stops at its next step


_STATES: weakref.WeakKeyDictionary[Any, _KernelState] = weakref.WeakKeyDictionary()


class KernelClient:
    """Talks to the kernel of one session; starts it on first use and after it died."""

    def __init__(self, session: BaseSandboxSession, *, python: str = "python3") -> None:
        self.session = session
        self.python = python
        self.state = _STATES.setdefault(session, _KernelState())

    async def run(self, code: str, timeout: float) -> CellResult:
        """Run one cell. Cancelled (asyncio, hence MCP cancellation), it is interrupted like
        `interrupt()` in the background; the next cell waits for that and says how it ended."""
        self.state.waiting += 1
        try:
            await self.state.lock.acquire()
        finally:
            self.state.waiting -= 1
        try:
            if self.state.finishing is not None:
                await asyncio.shield(self.state.finishing)
                self.state.finishing = None
            self.state.cells += 1
            cell = self.state.cells
            notes: list[str] = []
            if self.state.cancelled_note:
                notes.append(self.state.cancelled_note)
                self.state.cancelled_note = None
            fresh = False
            if not self.state.started:
                if cell > 1 and not self.state.loss_reported:
                    notes.append(LOST)
                await self._start()
                fresh = True
            request = {"code": code, "cell": cell, "timeout": timeout}
            reply = await self._send(request, timeout, notes, fresh)
            return CellResult(reply=reply, cell=cell, notes=notes)
        finally:
            self.state.lock.release()

    async def warm(self, steps: Sequence[str], timeout: float) -> bool:
        """Start the kernel, then run each of `steps` (imports) in it before the session's first
        cell, as the warm pool does, unseen by the session: its first cell is still cell 1,
        `interrupt` ignores a step, and a step that fails leaves no kernel (the first cell starts
        its own, with no note that state was lost: there was none). A cell that comes meanwhile
        waits for the step in progress only (`waiting`): the rest are left to the cell. Whether
        every step was done."""
        for step in [None, *steps]:
            if self.state.waiting:
                return False
            async with self.state.lock:
                if self.state.cells or self.state.finishing is not None:
                    return False
                self.state.warming = True
                try:
                    if not self.state.started:
                        await self._start()
                    done = True
                    if step is not None:
                        reply = await self._send({"code": step, "cell": 0, "timeout": timeout}, timeout, [], True)
                        done = reply.status == "ok" and not reply.state_lost
                except KernelError:
                    done = False
                finally:
                    self.state.warming = False
                if not done:  # `_start` ends this kernel's channel before the first cell's own
                    self.state.started, self.state.loss_reported = False, False
                    return False
        return True

    async def interrupt(self) -> bool:
        """Interrupt the cell in flight as Jupyter does (KeyboardInterrupt in the kernel): its
        call returns 'interrupted' and the variables stay. A cell that ignores SIGINT for
        INTERRUPT_GRACE_S is killed with the kernel's state, and its result says so. False when
        no cell was running."""
        ident = self.state.running
        if ident is None or self.state.warming:
            return False
        await self._request_interrupt(ident)
        return True

    async def _request_interrupt(self, ident: str) -> None:
        channel = self.state.channel
        try:
            if channel is not None:
                await channel.send({"op": "interrupt", "id": ident})
                return
            await self.session.exec("sh", "-c", INTERRUPT, "interrupt", ident, shell=False, timeout=10)
        except Exception:  # no sandbox left to reach: the cell ends with it
            pass

    async def _finish_cancelled(self, relay: asyncio.Future[Any], ident: str, cell: int) -> None:
        """A cancelled cell: interrupt it, wait for the kernel's reply, keep what it says."""
        await self._request_interrupt(ident)
        try:
            outcome = await relay
            reply = outcome if isinstance(outcome, CellReply) else self._reply(outcome)
        except Exception as exc:  # the relay failed or the kernel is gone: start anew next time
            self.state.started = False
            self.state.cancelled_note = f"cell {cell} was cancelled and its kernel did not answer ({exc})"
            return
        if reply.state_lost:
            self.state.loss_reported = True
            self.state.cancelled_note = (
                f"cell {cell} was cancelled: {reply.detail or 'the kernel was restarted'}. STATE LOST: "
                "all variables and imports are gone; re-run imports and data loading"
            )
        else:
            self.state.cancelled_note = (
                f"cell {cell} was cancelled and interrupted ({reply.status}); the kernel kept your variables"
            )

    async def answers(self, ack_s: float = PING_ACK_S) -> bool:
        """Whether the kernel is running and its state intact: one empty request that, unlike
        `run`, never starts a kernel. A live kernel acks at once, so a dead one costs `ack_s`,
        not the 3 s a cell waits. For the warm pool, before it hands a sandbox out."""
        request = {"code": "", "cell": 0, "timeout": PING_ACK_S}
        async with self.state.lock:
            if not self.state.started:
                return False
            if self.state.channel is not None:
                return await self._channel_answers(self.state.channel, request, ack_s)
            result = await self.session.exec(
                "bash", "-c", CLIENT, "client", os.urandom(8).hex(), json.dumps(request), "5", f"{ack_s:g}",
                shell=False, timeout=15,
            )  # fmt: skip
        if result.exit_code != 0:
            return False
        try:
            reply = CellReply.model_validate_json(result.stdout)
        except ValidationError:
            return False
        return reply.status == "ok" and not reply.state_lost

    @staticmethod
    async def _channel_answers(channel: KernelChannel, request: dict[str, Any], ack_s: float) -> bool:
        """`answers` over the channel: the ack within `ack_s`, an intact reply within 5 s."""
        try:
            reply = await channel.call(os.urandom(8).hex(), request, ack_s, 5.0)
            parsed = CellReply.model_validate(reply)
        except (TimeoutError, ChannelClosed, ValidationError):
            return False
        return parsed.status == "ok" and not parsed.state_lost

    async def _start(self) -> None:
        command = [self.python, "-I", "-S", "-c", kernel_server.BOOT, kernel_source(), "serve"]  # see BOOT
        try:
            self.session.register_persist_workspace_skip_path(KERNEL_DIR)
        except Exception:  # a mount at that path: the FIFOs are simply archived
            pass
        if self.state.channel is not None:  # one that stopped answering: end it first
            channel, self.state.channel = self.state.channel, None
            await channel.close()
        backend = backend_session(self.session)
        if isinstance(backend, Channels):
            try:
                self.state.channel = await KernelChannel.start(
                    backend, ["sh", "-c", START, "kernel", *command, "channel"], START_WAIT_S
                )
            except NotImplementedError:  # this backend has no channels: the FIFOs, as below
                pass
            except ChannelClosed as closed:
                raise KernelError(f"the Python kernel exited at start: {closed.output}") from None
            except TimeoutError:
                raise KernelError(f"the Python kernel did not start within {START_WAIT_S:g} s") from None
            else:
                self.state.started, self.state.loss_reported = True, False
                return
        try:
            # the one process exempt from the wall clock: each cell has its own limit (`lifetimes`)
            update = await self.session.pty_exec_start(
                "sh", "-c", START, "kernel", *command, shell=False, tty=False, yield_time_s=0.25,
                timeout=LIVES_WITH_SESSION,
            )  # fmt: skip
        except NotImplementedError:
            raise KernelError(NO_PROCESSES) from None
        if update.exit_code is not None:
            output = update.output.decode("utf-8", "replace")[-2000:]
            raise KernelError(f"the Python kernel exited at start (code {update.exit_code}): {output}")
        self.state.started, self.state.loss_reported = True, False

    async def _send(
        self, request: dict[str, Any], timeout: float, notes: list[str], fresh: bool
    ) -> CellReply:
        """Deliver one cell. A kernel that does not answer is started (once), then waited for."""
        ident = os.urandom(8).hex()
        payload = json.dumps(request, ensure_ascii=False)
        argument = payload
        if len(payload.encode("utf-8")) > MAX_ARGV_PAYLOAD:
            await self.session.mkdir(Path(KERNEL_DIR), parents=True)
            await self.session.write(
                Path(KERNEL_DIR) / f"req-{ident}.json", io.BytesIO(payload.encode("utf-8"))
            )
            argument = ""
        if self.state.channel is not None:
            inline = request if argument else None
            return await self._send_on_channel(ident, inline, request["cell"], timeout, notes, fresh)
        wait = timeout + kernel_server.GRACE_S + 10
        loop = asyncio.get_running_loop()
        give_up = loop.time() + START_WAIT_S
        while True:
            relay = asyncio.ensure_future(self.session.exec(
                "bash", "-c", CLIENT, "client", ident, argument, f"{wait:.0f}",
                shell=False, timeout=wait + 10,
            ))  # fmt: skip
            self.state.running = ident
            try:
                # shielded: a cancelled caller leaves the relay to bring the interrupted cell's reply
                result = await asyncio.shield(relay)
            except asyncio.CancelledError:
                self.state.finishing = asyncio.create_task(self._finish_cancelled(relay, ident, request["cell"]))
                raise
            except (ExecTimeoutError, TimeoutError):
                self.state.started = False
                raise KernelError(
                    f"the kernel did not answer within {wait + 10:.0f} s; a new one will be "
                    "started on the next call"
                ) from None
            finally:
                self.state.running = None
            if result.exit_code == 3 and loop.time() < give_up:
                if not fresh:  # it was running and has gone away
                    notes.append(LOST)
                    await self._start()
                    fresh = True
                    give_up = loop.time() + START_WAIT_S
                await asyncio.sleep(0.05)
                continue
            return self._reply(result)

    async def _send_on_channel(
        self, ident: str, request: dict[str, Any] | None, cell: int, timeout: float, notes: list[str], fresh: bool
    ) -> CellReply:
        """Deliver one cell over the channel (`request` None: it is in its file, as a large
        cell goes): the same outcomes as `_send`'s relay. A kernel gone before the cell started
        is started again (once, with the LOST note); one gone during it ends it as VANISHED."""
        wait = timeout + kernel_server.GRACE_S + 10
        while True:
            channel = self.state.channel
            assert channel is not None
            relay = asyncio.ensure_future(self._channel_relay(channel, ident, request, wait + 10))
            self.state.running = ident
            try:
                # shielded: a cancelled caller leaves the relay to bring the interrupted cell's reply
                return await asyncio.shield(relay)
            except asyncio.CancelledError:
                self.state.finishing = asyncio.create_task(self._finish_cancelled(relay, ident, cell))
                raise
            except TimeoutError:
                self.state.started = False
                raise KernelError(
                    f"the kernel did not answer within {wait + 10:.0f} s; a new one will be "
                    "started on the next call"
                ) from None
            except ChannelClosed:  # before the cell started: the kernel had gone away
                if fresh:
                    self.state.started = False
                    raise KernelError("the kernel exited before it took the cell") from None
                notes.append(LOST)
                await self._start()
                fresh = True
            finally:
                self.state.running = None

    async def _channel_relay(
        self, channel: KernelChannel, ident: str, request: dict[str, Any] | None, wait: float
    ) -> CellReply:
        """The kernel's reply to one cell on the channel, validated; ChannelClosed before the
        cell started, VANISHED when the kernel went away during it."""
        try:
            reply = await channel.call(ident, request, START_WAIT_S, wait)
        except ChannelClosed as closed:
            if not closed.acked:
                raise
            self.state.started, self.state.loss_reported = False, True
            return CellReply(status="crashed", state_lost=True, detail=VANISHED)
        try:
            return CellReply.model_validate(reply)
        except ValidationError as exc:
            raise KernelError(f"the kernel sent an unreadable reply: {exc.errors()[:1]}") from None

    def _reply(self, result: Any) -> CellReply:
        """The relay's outcome as the kernel's reply; KernelError when no kernel answered."""
        if result.exit_code == 6:
            self.state.started, self.state.loss_reported = False, True
            return CellReply(status="crashed", state_lost=True, detail=VANISHED)
        if result.exit_code != 0:
            self.state.started = False
            detail = (result.stderr or result.stdout).decode("utf-8", "replace")[-1000:]
            raise KernelError(f"could not reach the kernel (exit {result.exit_code}): {detail}")
        try:
            return CellReply.model_validate_json(result.stdout)
        except ValidationError as exc:
            raise KernelError(f"the kernel sent an unreadable reply: {exc.errors()[:1]}") from None


def _closing_note(reply: CellReply, timeout: float) -> str | None:
    """What the kernel says after the cell's output: a timeout, lost state, or its detail."""
    if reply.status == "interrupted" and reply.interrupted_on_request:
        return "interrupted on request: the kernel is still running and your variables are kept"
    if reply.status == "interrupted":
        return (
            f"interrupted after {reply.timed_out or timeout:g} s (the per-call limit): "
            "the kernel is still running and your variables are kept"
        )
    if reply.state_lost:
        return (
            f"{reply.detail}. STATE LOST: all variables and imports are gone; re-run "
            "imports and data loading"
        )
    return reply.detail or None


def cell_record(result: CellResult, *, timeout: float) -> Cell:
    """The cell for the run record: the reply's fields, each bounded, and the kernel's notes."""
    reply = result.reply
    closing = _closing_note(reply, timeout)
    return Cell(
        number=result.cell,
        status=reply.status,
        duration_s=reply.duration_s,
        stdout=bounded(reply.stdout),
        stderr=bounded(reply.stderr),
        value=None if reply.value is None else bounded(reply.value),
        table=reply.table,
        error=None if reply.error is None else bounded(reply.error),
        notes=[bounded(n) for n in result.notes + ([closing] if closing else [])],
        figures=[f.path for f in result.figures],
        state_lost=reply.state_lost,
        fresh_kernel=LOST in result.notes,
        interrupted_on_request=reply.interrupted_on_request,
    )


def format_result(result: CellResult, *, images: bool, timeout: float) -> str:
    """The text the model reads. User output comes first; the figures line is always last."""
    reply = result.reply
    status = cell_status_text(reply.status, reply.duration_s, on_request=reply.interrupted_on_request)
    lines = [f"[cell {result.cell}: {status}]"]
    lines += [f"[kernel] {note}" for note in result.notes]
    for header, body in (("stdout", reply.stdout), ("stderr", reply.stderr)):
        if body:
            lines += [f"[{header}]", body.rstrip("\n")]
    if reply.value is not None:
        lines += [f"[Out {result.cell}]", reply.value]
    if reply.error:
        lines += ["[error]", reply.error.rstrip("\n")]
    closing = _closing_note(reply, timeout)
    if closing:
        lines.append(f"[kernel] {closing}")
    figures = result.figures
    for fig in figures:
        shown = "shown below" if images else "not shown: this model reads text only"
        lines.append(
            f"[figure] {fig.path}: {fig.width}x{fig.height} px PNG ({shown}); {fig.description}"
        )
    if figures:
        lines.append(FIGURES_LINE + ", ".join(f.path for f in figures))
    return "\n".join(lines)


@dataclass(init=False)
class RunPythonTool(FunctionTool, KeepsCells):
    """The `run_python` function tool: strict schema {"code": string}, plain function tool, so
    Responses and Chat Completions models both accept it."""

    client: KernelClient = field(init=False, repr=False, compare=False)
    cells: dict[str, Cell] = field(init=False, repr=False, compare=False)
    images: bool = field(init=False, default=True, compare=False)
    timeout: float = field(init=False, default=60.0, compare=False)

    def __init__(self, session: BaseSandboxSession, *, images: bool, timeout: float) -> None:
        self.client = KernelClient(session)
        self.images = images
        self.timeout = timeout
        self.cells = {}
        super().__init__(
            name=TOOL_NAME,
            description=DESCRIPTION.format(timeout=timeout),
            params_json_schema={
                "type": "object",
                "properties": {"code": {"type": "string", "description": "Python source to run."}},
                "required": ["code"],
                "additionalProperties": False,
            },
            on_invoke_tool=self._invoke,
            strict_json_schema=True,
        )

    async def _invoke(self, context: object, raw_input: str) -> str | list[ToolOutputText | ToolOutputImage]:
        try:
            args = RunPythonArgs.model_validate_json(raw_input)
        except ValidationError:
            return 'run_python needs JSON arguments like {"code": "print(1)"}'
        output, cell = await self.run_cell(args.code)
        if cell is not None:
            self.cells[getattr(context, "tool_call_id", None) or self.name] = cell
            while len(self.cells) > KEPT_CELLS:
                del self.cells[next(iter(self.cells))]
        return output

    def take_cell(self, call_id: str) -> Cell | None:
        """The cell that call `call_id` ran, for the run record (once); None if no cell ran."""
        return self.cells.pop(call_id, None)

    async def run(self, code: str) -> str | list[ToolOutputText | ToolOutputImage]:
        """Run one cell; the text result, plus the figures as images when the model sees images."""
        return (await self.run_cell(code))[0]

    async def run_cell(self, code: str) -> tuple[str | list[ToolOutputText | ToolOutputImage], Cell | None]:
        """The result `run` gives the model, and the cell for the record (None if none ran)."""
        if len(code.encode("utf-8")) > MAX_CODE_BYTES:
            return f"the code is over {MAX_CODE_BYTES // 1024**2} MiB; write it to a file and run that", None
        try:
            result = await self.client.run(code, self.timeout)
        except KernelError as exc:
            return f"[kernel] {exc}", None
        cell = cell_record(result, timeout=self.timeout)
        text = format_result(result, images=self.images, timeout=self.timeout)
        if not (self.images and result.figures):
            return text, cell
        parts: list[ToolOutputText | ToolOutputImage] = [ToolOutputText(text=text)]
        for fig in result.figures:
            image = await self._image(fig.path)
            parts.append(image if image is not None else ToolOutputText(text=f"({fig.path}: unreadable or too large to show)"))
        return parts, cell

    async def _image(self, path: str) -> ToolOutputImage | None:
        data = await read_figure(self.client.session, path)
        if data is None:
            return None
        return ToolOutputImage(image_url="data:image/png;base64," + base64.b64encode(data).decode())


async def read_figure(session: BaseSandboxSession, path: str) -> bytes | None:
    """A cell's figure, read with a bound (MAX_IMAGE_BYTES) and only if it is a PNG (signature
    and an IHDR chunk first): the sandbox wrote it, so anything else is refused (None)."""
    try:
        data = await session.read_bounded(Path(path), max_bytes=MAX_IMAGE_BYTES + 1)
    except Exception:  # removed by a later command, or not readable
        return None
    if len(data) > MAX_IMAGE_BYTES or not (data.startswith(PNG_SIGNATURE) and data[12:16] == b"IHDR"):
        return None
    return data


class PythonKernel(Capability):
    """Gives the model `run_python`, a live Python session in the sandbox, beside the shell."""

    type: Literal["python_kernel"] = "python_kernel"
    images: bool = True
    timeout: float = Field(default=60.0, gt=0)
    bound: OutputBound = OutputBound()

    def tools(self) -> list[Tool]:
        if self.session is None:
            raise ValueError("PythonKernel capability is not bound to a SandboxSession")
        if not keeps_processes(self.session):
            return []  # offering a tool that can only fail would waste the model's turns
        return [bound_tool(RunPythonTool(self.session, images=self.images, timeout=self.timeout), self.session, self.bound)]

    async def instructions(self, manifest: Manifest) -> str | None:
        if self.session is not None and not keeps_processes(self.session):
            return None
        return INSTRUCTIONS
