"""The signals that stop coderoom (SIGINT, SIGTERM, SIGHUP), held back or let through, without
asyncio (`interrupts` turns them into cancellations inside an event loop).

`coderoom sandbox run` holds them back while a sandbox is being made (`held`): one that came in
the middle would leave a folder, a cgroup or a bwrap with no name to remove it by. It is delivered
when the block ends. A step that makes nothing and may wait long (a probe with a timeout) lets
them through meanwhile (`let_through`).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def held() -> Iterator[None]:
    """STOP_SIGNALS blocked meanwhile; one that came is delivered at the end."""
    with _masked(signal.SIG_BLOCK):
        yield


@contextmanager
def let_through() -> Iterator[None]:
    """STOP_SIGNALS unblocked meanwhile (one held back before is delivered now)."""
    with _masked(signal.SIG_UNBLOCK):
        yield


@contextmanager
def _masked(how: int) -> Iterator[None]:
    previous = signal.pthread_sigmask(how, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
