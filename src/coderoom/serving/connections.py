"""How many connections a coderoom server holds and how long one may take to send its request
head, so that clients without a token cannot wedge it (attack A3-S6, docs/security.md).

Why: h11 has no deadline for a request head and uvicorn's `timeout_keep_alive` runs only
between requests, so a client that sends `GET / HTTP/1.1\\r\\nHo` and stops held its connection
(and a file descriptor) for good; enough of them used every descriptor. Then `accept()` fails
with EMFILE on every wake-up, and asyncio logs each failure with a traceback: hundreds of lines
that, on a stderr nobody drains (a pipe), block the event loop in a write, so the server answered
nothing and did not even see SIGTERM.

* `HeadDeadlineProtocol`: uvicorn's h11 protocol that closes a connection whose request head is
  not complete `HEAD_TIMEOUT_S` after it opened or after its first byte following a response,
  and that closes at once a connection over `connection_cap()`;
* `connection_cap()`: `MAX_CONNECTIONS`, kept `FD_RESERVE` descriptors under the soft
  open-files limit (sandboxes, records and uploads need descriptors too);
* `raise_open_files_limit()`: the soft limit raised to the hard one at start;
* `quiet_accept_errors`: a loop exception handler that reports an exhausted `accept()` in one
  line at most every `ACCEPT_REPORT_EVERY_S` (asyncio retries the accept by itself a second later).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 512
FD_RESERVE = 64
ACCEPT_REPORT_EVERY_S = 60.0
ACCEPT_EXHAUSTED = "socket.accept() out of system resource"

logger = logging.getLogger("coderoom.serving")


def raise_open_files_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard one; the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # the system refuses (e.g. an unlimited hard limit above fs.nr_open): keep the soft one
    return soft


def connection_cap(open_files_limit: int) -> int:
    """Connections a server holds at once: `MAX_CONNECTIONS`, or fewer so that `FD_RESERVE`
    descriptors stay free for everything else under `open_files_limit` (at least 1)."""
    if open_files_limit == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, open_files_limit - FD_RESERVE))


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head and a connection cap
    (`Config.limit_concurrency`, which uvicorn itself checks only once a head is complete)."""

    head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        cap = self.config.limit_concurrency
        if cap is not None and len(self.connections) > cap:
            transport.close()  # over the cap: its descriptor is given back at once
            return
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow_head()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _follow_head(self) -> None:
        """Disarm once a head is complete; arm when bytes of a next head wait (keep-alive)."""
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            self._disarm_head_deadline()
        elif self.head_timer is None and self.conn.trailing_data[0]:
            self._arm_head_deadline()

    def _arm_head_deadline(self) -> None:
        self.head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_too_slow)

    def _disarm_head_deadline(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_too_slow(self) -> None:
        self.head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


class AcceptErrorReporter:
    """A loop exception handler: an exhausted `accept()` in one line, at most once every
    `ACCEPT_REPORT_EVERY_S`; everything else to asyncio's default handler."""

    def __init__(self) -> None:
        self.last_report = float("-inf")

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != ACCEPT_EXHAUSTED:
            loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self.last_report >= ACCEPT_REPORT_EVERY_S:
            self.last_report = now
            logger.warning("cannot accept connections for now: %s (retrying)", context.get("exception"))
