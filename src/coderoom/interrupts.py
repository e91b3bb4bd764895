"""SIGINT, SIGTERM and SIGHUP end a run the same way: recorded, saved, cleaned up, exit 128+N.

Why one path for the three: a user's Ctrl-C, a service manager's SIGTERM and a closed terminal's
SIGHUP all mean "stop now, keep what you have". Left to Python's defaults, SIGTERM and SIGHUP kill
the process on the spot: no run_end in the record, no workspace saved, and the session folder
(with copies of the inputs) left in $TMPDIR forever.

`run_interruptible` runs the whole run as one task and turns signals into cancellations:

1. the first signal cancels the run: the model request or tool call in flight stops, the
   workspace is saved (bounded by `lifecycle.SAVE_TIMEOUT_S`), the session is closed and the record
   ends with run_end status "interrupted" and the signal's name;
2. a second signal cancels the save too: what was half-written is removed (see
   `artifacts.save_workspace`: temporary names, renamed when complete) and run_end says the
   workspace is incomplete; the session is still closed (`finish_uncancelled`);
3. a third signal exits at once (`os._exit`) with the first signal's code, for a close that hangs.

The exit code is 128 + the first signal's number: 130 SIGINT, 143 SIGTERM, 129 SIGHUP. Before
and after the run's event loop (job validation, the image build), `raising_on_signals` turns
the same signals into `Interrupted`, so they exit with the same codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from .errors import CoderoomError
from .signal_masks import STOP_SIGNALS

T = TypeVar("T")

SIGNALS = STOP_SIGNALS
SIGNALS_BEFORE_HARD_EXIT = 3


class Interrupted(CoderoomError):
    """The run was stopped by a signal; the exit code is 128 + its number."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.exit_code = 128 + signum


@dataclass
class _Received:
    first: int | None = None
    count: int = 0


_received: ContextVar[_Received | None] = ContextVar("coderoom_signals", default=None)


def received_signal() -> str | None:
    """The name of the signal that interrupted this run ("SIGTERM"), or None (a plain cancel)."""
    received = _received.get()
    if received is None or received.first is None:
        return None
    return signal.Signals(received.first).name


_first_signal: list[int] = []  # the first signal this process got, once it got one


def _raise_interrupted(signum: int, _frame: object) -> None:
    _first_signal[:1] = _first_signal[:1] or [signum]
    raise Interrupted(signum)


def _exit_at_once(_signum: int, _frame: object) -> None:
    os._exit(128 + _first_signal[0])


def exit_now(code: int) -> NoReturn:
    """End an interrupted process with `code`, now: stdio flushed, no interpreter finalization.
    Finalization restores the default signal handlers, so a second signal while it ran (it can
    take a second: threads, atexit, freeing a run's objects) would end the process by SIGTERM's
    default action (-15) instead of with 143. Everything worth keeping is saved by now."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


@contextmanager
def raising_on_signals() -> Iterator[None]:
    """Inside, SIGINT/SIGTERM/SIGHUP raise `Interrupted` (outside an event loop: before a run)."""
    previous = {signum: signal.signal(signum, _raise_interrupted) for signum in SIGNALS}
    try:
        yield
    finally:
        # once stopped by a signal, a later one (while the process winds down) exits with the
        # first one's code at once, never by the default action (-15 instead of 143)
        for signum, handler in previous.items():
            signal.signal(signum, _exit_at_once if _first_signal else handler)


async def run_interruptible(run: Coroutine[Any, Any, T]) -> T:
    """Await `run`, cancelling it on SIGINT/SIGTERM/SIGHUP; raises `Interrupted` if one came."""
    loop = asyncio.get_running_loop()
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    received = _Received()
    _received.set(received)  # the task below copies this context, so it sees the same object
    task = asyncio.ensure_future(run)

    def on_signal(signum: int) -> None:
        received.count += 1
        if received.first is None:
            received.first = signum
            _first_signal[:1] = _first_signal[:1] or [signum]
        if received.count >= SIGNALS_BEFORE_HARD_EXIT:
            os._exit(128 + received.first)
        task.cancel()

    for signum in SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await task
    except asyncio.CancelledError:
        if received.first is None:
            raise
        raise Interrupted(received.first) from None
    finally:
        for signum, handler in previous.items():
            loop.remove_signal_handler(signum)
            signal.signal(signum, handler)


async def finish_uncancelled(work: Awaitable[T]) -> T:
    """Await `work` to its end even if this task is cancelled meanwhile, then re-raise the cancel.

    For cleanup that must not be cut short (closing a session): `asyncio.shield` alone lets the
    caller go on while the shielded work runs unowned, and `asyncio.run` cancels it on the way out.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result
