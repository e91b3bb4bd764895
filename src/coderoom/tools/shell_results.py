"""What each call of the shell tools (`exec_command`, `write_stdin`) did, kept for the run record.

The SDK's shell tools answer the model in prose ("Chunk ID: ...", "Process exited with code N",
"Output:"), words that may change with any SDK release; a record that kept only them would make
`export` and `rerun` parse them back. So `record_shell` gives the tool its session through
`WatchedSession`, which passes every call on unchanged and notes what `exec`, `pty_exec_start` and
`pty_write_stdin` returned (or that they timed out) for the call in progress (a context variable:
calls the SDK runs in parallel each have their own), and turns that into a `ShellResult` kept by
call id until the recording hook takes it (`take_shell`, once).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agents.sandbox.errors import ExecTimeoutError
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.pty_types import PtyExecUpdate
from agents.sandbox.types import ExecResult
from agents.tool import FunctionTool
from agents.tool_context import ToolContext

from ..record.events import ShellResult, ShellStatus
from ..record.writer import shell_result

KEPT_RESULTS = 64  # results no hook took (a tool used outside a recorded run) are dropped, oldest first


@dataclass
class _Seen:
    """What the session returned during one call."""

    output: str = ""
    exit_code: int | None = None
    running: int | None = None  # the PTY session left running
    tokens_before_cut: int | None = None
    timed_out: bool = False

    @property
    def status(self) -> ShellStatus:
        if self.running is not None:
            return "running"
        if self.exit_code is not None:
            return "exited"
        return "timed_out" if self.timed_out else "not_run"

    def update(self, update: PtyExecUpdate) -> None:
        self.output = update.output.decode("utf-8", errors="replace")
        self.exit_code, self.running = update.exit_code, update.process_id
        self.tokens_before_cut = update.original_token_count


_CALL: ContextVar[_Seen | None] = ContextVar("coderoom_shell_call", default=None)


def _seen() -> _Seen:
    return _CALL.get() or _Seen()  # outside a recorded call: noted nowhere


class WatchedSession:
    """The session as a shell tool sees it: every attribute is the session's own; the three
    command calls are passed on and their results noted for the call in progress."""

    def __init__(self, session: BaseSandboxSession) -> None:
        self._session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def exec(self, *command: Any, **options: Any) -> ExecResult:
        try:
            result = await self._session.exec(*command, **options)
        except (ExecTimeoutError, TimeoutError):
            _seen().timed_out = True
            raise
        seen = _seen()
        seen.output = (result.stdout + result.stderr).decode("utf-8", errors="replace")
        seen.exit_code, seen.running = result.exit_code, None
        return result

    async def pty_exec_start(self, *command: Any, **options: Any) -> PtyExecUpdate:
        update = await self._session.pty_exec_start(*command, **options)
        _seen().update(update)
        return update

    async def pty_write_stdin(self, **options: Any) -> PtyExecUpdate:
        update = await self._session.pty_write_stdin(**options)
        _seen().update(update)
        return update


def _arguments(raw_input: str) -> dict[str, Any]:
    try:
        arguments = json.loads(raw_input)
    except (TypeError, ValueError, RecursionError):
        return {}
    return arguments if isinstance(arguments, dict) else {}


def _word(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _result(tool: str, raw_input: str, seen: _Seen, wall_time_s: float) -> ShellResult:
    arguments = _arguments(raw_input)
    named: dict[str, str | None] = {}
    if tool == "exec_command":
        named = {"command": arguments.get("cmd") if isinstance(arguments.get("cmd"), str) else None,
                 "workdir": _word(arguments.get("workdir")), "shell": _word(arguments.get("shell"))}
        session = seen.running
    else:  # write_stdin: the session it wrote to
        wanted = arguments.get("session_id")
        session = seen.running if seen.running is not None else wanted if isinstance(wanted, int) else None
    return shell_result(seen.status, seen.output, exit_code=None if seen.running is not None else seen.exit_code,
                        session_id=session, wall_time_s=wall_time_s, tokens_before_cut=seen.tokens_before_cut,
                        **named)


class ShellResults:
    """The results of one shell tool's calls, by call id, until the recording hook takes them."""

    def __init__(self) -> None:
        self._results: dict[str, ShellResult] = {}

    def keep(self, call_id: str, result: ShellResult) -> None:
        self._results[call_id] = result
        while len(self._results) > KEPT_RESULTS:
            del self._results[next(iter(self._results))]

    def take(self, call_id: str) -> ShellResult | None:
        return self._results.pop(call_id, None)


def record_shell(tool: FunctionTool) -> FunctionTool:
    """`tool` (the SDK's exec_command or write_stdin, which hold their session as `session`),
    its calls noted as `ShellResult`s the hook takes with `tool.take_shell(call_id)`
    (`record.hooks.KeepsShellResults`)."""
    tool.session = WatchedSession(tool.session)  # type: ignore[attr-defined]
    invoke: Callable[[ToolContext[Any], str], Awaitable[Any]] = tool.on_invoke_tool
    results = ShellResults()

    async def recorded_invoke(context: ToolContext[Any], raw_input: str) -> Any:
        seen, started = _Seen(), time.monotonic()
        token = _CALL.set(seen)
        try:
            return await invoke(context, raw_input)
        finally:  # also when the tool failed: what ran, or that nothing did
            _CALL.reset(token)
            call_id = getattr(context, "tool_call_id", None) or tool.name
            results.keep(call_id, _result(tool.name, raw_input, seen, round(time.monotonic() - started, 4)))

    tool.on_invoke_tool = recorded_invoke
    tool.take_shell = results.take  # type: ignore[attr-defined]
    return tool
