"""PTY sessions with the Agents SDK's semantics, shared by the local and Docker SDK adapters.

The SDK's shell tool calls `pty_exec_start` for every `exec_command` when `supports_pty()` is
True: a command still running after `yield_time_ms` comes back with a session id, and the model
polls it, or types into it (tty=true), with `write_stdin`. This mixin keeps those sessions the
way the SDK's own UnixLocal and Docker sessions do (random ids, an ended process reported once
then forgotten, output cut to `max_output_tokens`, UTF-8 characters kept whole across polls,
input refused with the SDK's words for a process without a terminal, the SDK's rule for which
session to end at the cap) over a backend's live processes (`live.LiveProcess`), and adds
coderoom's rules: at most MAX_LIVE_PROCESSES at once (starts take turns, checked and counted
under one lock), the wall clock (`lifetimes`), and the limit that ended a process named in its
output and in the run's list (`stops`).

A backend session provides `_live_limits`, `_start_live`, `_end_live` and `_end_all_live`, and
may name more limits in `_stopped_by`.
"""

from __future__ import annotations

import asyncio
import codecs
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agents.sandbox.errors import ExecTransportError, PtySessionNotFoundError
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.pty_types import (
    PtyExecUpdate,
    allocate_pty_process_id,
    clamp_pty_yield_time_ms,
    process_id_to_prune_from_meta,
    resolve_pty_write_yield_time_ms,
    truncate_text_by_tokens,
)
from agents.sandbox.types import User

from ..errors import SandboxFailed
from .lifetimes import LIVES_WITH_SESSION, lifetime
from .limits import Limits
from .live import MAX_LIVE_PROCESSES, LiveProcess
from .stops import log_stop, named_stop, stop_note

NO_STDIN = "stdin is not available for this process"  # the SDK's shell tool knows these words


@dataclass
class _Session:
    """A live process, a decoder that keeps UTF-8 characters whole across polls, when the model
    last used it (the SDK's pruning rule), and whether it is exempt (the kernel)."""

    process: LiveProcess
    exempt: bool = False
    last_used: float = field(default_factory=time.monotonic)
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )


@asynccontextmanager
async def transport(command: tuple[str | Path, ...]) -> AsyncIterator[None]:
    """A broken sandbox (SandboxFailed) as the SDK's ExecTransportError for `command`."""
    try:
        yield
    except SandboxFailed as exc:
        raise ExecTransportError(command=command, context={"reason": exc.message}) from exc


class PtySessions(BaseSandboxSession):
    """The base of a coderoom SDK session, before the SDK's own class (Docker's), so these
    methods are the ones used. A BaseSandboxSession itself, so the Docker adapter can re-class
    the SDK's session instance (same layout)."""

    limits_hit: list[str]

    def _pty_sessions(self) -> dict[int, _Session]:
        """The sessions by id, made on first use (the re-classed Docker session ran no __init__)."""
        sessions: dict[int, _Session] | None = self.__dict__.get("_coderoom_pty")
        if sessions is None:
            sessions = self.__dict__["_coderoom_pty"] = {}
        return sessions

    def _starting(self) -> asyncio.Lock:
        """Held from the MAX_LIVE_PROCESSES check to the new session's registration, so starts
        that run at once (the model's concurrent tool calls) take their turns: without it each
        passed the check before any registered (SVC-P1), and a session ended to make room could
        be one whose start was still under way. Made on first use, as `_pty_sessions`."""
        lock: asyncio.Lock | None = self.__dict__.get("_coderoom_pty_start")
        if lock is None:
            lock = self.__dict__["_coderoom_pty_start"] = asyncio.Lock()
        return lock

    # ------------------------------------------------------------------ the backend's part

    def _live_limits(self) -> Limits:
        raise NotImplementedError

    async def _start_live(self, argv: list[str], *, tty: bool, lifetime: float | None) -> LiveProcess:
        raise NotImplementedError

    async def _start_channel(self, argv: list[str], cap: int) -> LiveProcess:
        """A live process with no wall clock, its stdin a pipe, its output kept up to `cap`
        bytes; NotImplementedError where the backend has none (the kernel then uses FIFOs)."""
        raise NotImplementedError

    async def _end_live(self, process: LiveProcess) -> None:
        raise NotImplementedError

    async def _end_all_live(self) -> None:
        raise NotImplementedError

    async def _stopped_by(self, exit_code: int, output: bytes) -> str | None:
        """The limit an ended process ran into, named from how it ended (`stops`)."""
        return named_stop(exit_code, output, self._live_limits())

    # ------------------------------------------------------------------ the SDK's API

    def supports_pty(self) -> bool:
        return True

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
        """Start a process that outlives this call: a PTY session, or the run_python kernel.

        With `tty` it runs on a terminal made inside the sandbox. Its wall clock is
        `Limits.timeout` from its start (a shorter `timeout` shortens it; `LIVES_WITH_SESSION`,
        the kernel's, removes it). At MAX_LIVE_PROCESSES, the SDK's rule picks one to end."""
        argv = self._prepare_exec_command(*command, shell=shell, user=user)
        async with self._starting():  # SVC-P1: the cap is checked and the start counted at once
            await self._make_room()
            async with transport(tuple(argv)):
                process = await self._start_live(argv, tty=tty, lifetime=lifetime(timeout, self._live_limits()))
            sessions = self._pty_sessions()
            process_id = allocate_pty_process_id(set(sessions))
            sessions[process_id] = _Session(process, exempt=timeout == LIVES_WITH_SESSION)
        yield_ms = 10_000 if yield_time_s is None else int(yield_time_s * 1000)
        return await self._pty_update(process_id, clamp_pty_yield_time_ms(yield_ms), max_output_tokens)

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: float | None = None,
        max_output_tokens: int | None = None,
    ) -> PtyExecUpdate:
        session = self._pty_sessions().get(session_id)
        if session is None:
            raise PtySessionNotFoundError(session_id=session_id)
        if chars:
            if not session.process.tty:
                raise RuntimeError(NO_STDIN)
            async with transport(("write_stdin", str(session_id))):
                await session.process.write(chars.encode())
        session.last_used = time.monotonic()
        yield_ms = 250 if yield_time_s is None else int(yield_time_s * 1000)
        yield_ms = resolve_pty_write_yield_time_ms(yield_time_ms=yield_ms, input_empty=not chars)
        return await self._pty_update(session_id, yield_ms, max_output_tokens)

    async def start_channel(self, *command: str, cap: int) -> LiveProcess:
        """Start coderoom's own run_python kernel with a channel to the host: its stdin a pipe
        (`write`), its output read as it comes (`collect_any`, at most `cap` bytes kept), so a
        cell needs no sandbox command of its own. Not an SDK call (no tool of the model's can
        reach it), so, like `pty_exec_start(timeout=LIVES_WITH_SESSION)`, it has no wall clock;
        it counts towards MAX_LIVE_PROCESSES, is never the one ended to make room, and ends with
        the session or `end_channel`. NotImplementedError where the backend has no channels."""
        argv = self._prepare_exec_command(*command, shell=False, user=None)
        async with self._starting():
            await self._make_room()
            async with transport(tuple(argv)):
                process = await self._start_channel(argv, cap)
            sessions = self._pty_sessions()
            sessions[allocate_pty_process_id(set(sessions))] = _Session(process, exempt=True)
        return process

    async def end_channel(self, process: LiveProcess) -> None:
        """Kill a process `start_channel` started (one that stopped answering) and forget it."""
        sessions = self._pty_sessions()
        for process_id in [pid for pid, s in sessions.items() if s.process is process]:
            del sessions[process_id]
        await self._end_live(process)

    async def pty_terminate_all(self) -> None:
        self._pty_sessions().clear()
        await self._end_all_live()

    # ------------------------------------------------------------------ bookkeeping

    async def _make_room(self) -> None:
        """Below MAX_LIVE_PROCESSES sessions, ending the one the SDK's rule picks (an ended one
        first, never one of the 8 most recently used, never the kernel)."""
        sessions = self._pty_sessions()
        if len(sessions) < MAX_LIVE_PROCESSES:
            return
        meta = [(pid, s.last_used, not s.process.alive) for pid, s in sessions.items() if not s.exempt]
        victim = process_id_to_prune_from_meta(meta)
        if victim is not None:
            await self._end_live(sessions.pop(victim).process)

    async def _pty_update(self, process_id: int, yield_ms: int, max_output_tokens: int | None) -> PtyExecUpdate:
        sessions = self._pty_sessions()
        session = sessions[process_id]
        process = session.process
        data, closed = await process.collect(yield_ms / 1000)
        exit_code = process.exit_code if closed else None
        if exit_code is not None:  # the SDK contract: an ended process is reported once, then gone
            if sessions.get(process_id) is session:
                del sessions[process_id]
            await self._end_live(process)
            stopped_by = process.stopped_by or await self._stopped_by(exit_code, data)
            if stopped_by and not process.stopped_by:
                data += stop_note(stopped_by)
            log_stop(self.limits_hit, stopped_by)
        output, token_count = truncate_text_by_tokens(session.decoder.decode(data, final=closed), max_output_tokens)
        return PtyExecUpdate(
            process_id=None if exit_code is not None else process_id,
            output=output.encode("utf-8", errors="replace"),
            exit_code=exit_code,
            original_token_count=token_count,
        )
