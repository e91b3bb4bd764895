"""`SessionManager`: the live sessions of a long-lived service (the web page, the MCP server),
with a cap on how many live at once, an idle timeout, and the same limits for every session.

Why here and not in each server: both servers must refuse the same way when full, close the same
way when idle, and leave nothing behind on shutdown (`close_all`, which saves every workspace
into its run folder as a run's end does).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import SessionLost, TooManySessions, UnknownSession
from ..sandboxes.base import SandboxBackend
from ..sandboxes.limits import Limits
from .holder import LiveSession, Opener, lost_message
from .pool import Pool
from .session import Session

if TYPE_CHECKING:
    from ..sandboxes.spec import EnvironmentSpec

MAX_SESSIONS = 8  # live sessions at once, by default
IDLE_TIMEOUT_S = 900.0  # a session nobody used for this long is closed (its record kept)
REAP_INTERVAL_MAX_S = 5.0  # how often, at most this far apart, idle sessions are looked for
REAP_INTERVAL_MIN_S = 0.1  # and at least this far apart
MAX_LOST_KEPT = 256  # lost sessions whose reason `get` still gives (then: no such session)
MAX_CONCURRENT_OPENS = 2
"""Sessions being opened at once (their files read, sandboxes started); more wait their turn,
each already holding its slot, so a burst of opens costs at most this many uploads in memory."""


class SessionManager:
    """Opens, finds and closes sessions; `async with` closes them all (and its pool) at the end."""

    def __init__(
        self,
        *,
        max_sessions: int = MAX_SESSIONS,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        limits: Limits | None = None,
        environment: EnvironmentSpec | None = None,
        sandbox: str = "local",
        model: str | None = None,
        runs_dir: str | os.PathLike[str] = "runs",
        pool: Pool | None = None,
        instructions: str = "",
        backend: SandboxBackend | None = None,
        opener: Opener | None = None,
    ) -> None:
        """`environment`: the packages every session's sandbox has (`--package`); `backend`: an
        object to run every session's sandbox instead of the registry's, named by `sandbox`
        (tests hand in the fake; see `registry.backend_for`). `opener`: what opens a session from
        these settings, `Session.open` (in this process) unless given (`ray_session.RayOpener`: on
        a Ray cluster's node)."""
        if max_sessions < 1 or idle_timeout_s <= 0:
            raise ValueError("max_sessions must be >= 1 and idle_timeout_s > 0")
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self.defaults: dict[str, Any] = {
            "limits": limits or Limits(), "environment": environment, "sandbox": sandbox, "model": model, "runs_dir": Path(runs_dir),
            "pool": pool, "instructions": instructions, "backend": backend,
        }
        self.pool = pool
        self._opener: Opener = opener or Session.open
        self._sessions: dict[str, LiveSession] = {}
        self._lost: dict[str, str] = {}  # session id -> why it was lost (its node went away)
        self._opening = 0
        self._open_turns = asyncio.Semaphore(MAX_CONCURRENT_OPENS)
        self._reaper: asyncio.Task[None] | None = None
        self._released: dict[str, tuple[float, float]] = {}  # session id -> (grace, monotonic deadline)
        self._wake = asyncio.Event()  # a release: the reaper looks again at once, at its grace's pace
        self._recovery: asyncio.Task[None] | None = None  # the start's recovery, while it runs

    @property
    def live(self) -> list[LiveSession]:
        """The sessions open now (not one whose node was lost, which `get` still explains)."""
        return [session for session in self._sessions.values() if session.lost is None]

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One of the max_sessions places, held while a session opens or a whole run (the MCP
        server's run_job) lasts; TooManySessions, before anything is read or started, when none
        is free."""
        if len(self._sessions) + self._opening >= self.max_sessions:
            raise TooManySessions(
                f"{self.max_sessions} sessions or runs are live (the max_sessions limit); close one first"
            )
        self._opening += 1
        try:
            yield
        finally:
            self._opening -= 1

    async def open(self, *, prepare: Callable[[], Awaitable[dict[str, Any]]] | None = None, **kw: Any) -> LiveSession:
        """A new session with the manager's settings (`kw` overrides them, see `Session.open`).

        `prepare` gives more of `kw` (the files, read from a request): it is awaited only once a
        slot is held and it is this open's turn (MAX_CONCURRENT_OPENS), so a refused open reads
        nothing."""
        async with self.slot():
            self._start_reaper()
            async with self._open_turns:
                if prepare is not None:
                    kw = {**kw, **await prepare()}
                session = await self._opener(**{**self.defaults, **kw})
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> LiveSession:
        """The live session `session_id`: UnknownSession when there is none, SessionLost (with
        the reason) for one whose node went away (forgotten here from then on)."""
        session = self._sessions.get(session_id)
        if session is not None and session.lost is not None:
            self._forget_lost(session)
        if session_id in self._lost:
            raise SessionLost(self._lost[session_id])
        if session is None:
            raise UnknownSession(
                f"no live session {session_id[:40]!r}: it was closed, idled out, or never opened"
            )
        return session

    async def close(self, session_id: str) -> Path:
        """Close one session (its run folder); an unknown id is UnknownSession. A session whose
        save the disk refused (SaveFailed) stays live, so closing it again can save it."""
        session = self.get(session_id)
        try:
            return await session.close()
        finally:
            if session.closed:
                self._sessions.pop(session_id, None)

    def release_soon(self, session_id: str, grace_s: float) -> None:
        """Its client is gone (the MCP server's `presence`): the session is closed and saved as
        at the idle timeout once `grace_s` has passed, unless `keep` is called first (a client
        that came back). A session that is busy then is closed when its request ends."""
        if session_id in self._sessions and grace_s >= 0:
            self._released[session_id] = (grace_s, time.monotonic() + grace_s)
            self._wake.set()
            self._start_reaper()

    def keep(self, session_id: str) -> None:
        """Its client is back (or another one uses it): the session lives on under the idle timeout."""
        self._released.pop(session_id, None)

    def released(self, session_id: str) -> float | None:
        """Seconds left before a released session is closed (None: not released)."""
        found = self._released.get(session_id)
        return None if found is None else max(0.0, found[1] - time.monotonic())

    async def close_all(self) -> None:
        """Shutdown: the start's recovery is waited for (it saves dead owners' workspaces, each
        bounded by its archive deadline; a second signal cancels it as it cancels a save), the
        reaper stops, every session is closed and saved, and the pool too."""
        if self._recovery is not None:
            await asyncio.gather(self._recovery, return_exceptions=True)
            self._recovery = None
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(s.close(keep_unsaved=False) for s in sessions), return_exceptions=True)
        if self.pool is not None:
            await self.pool.close()

    async def __aenter__(self) -> SessionManager:
        """Start recovering the workspaces of this runs folder's sessions whose owner died (a
        kill -9 of a previous server): saved into their run folders, said on stderr when done.
        In the background: a recovery takes what a close's archive takes (up to its deadline,
        600 s, per workspace; 127 s measured for 99,000 files a sandbox wrote in 2 s), and the
        server answers meanwhile (attack D-R8, docs/security.md); `close_all` waits for it."""
        self._recovery = asyncio.create_task(self._recover(), name="coderoom-recovery")
        return self

    async def _recover(self) -> None:
        from ..recovery import recover
        from ..sandboxes.spec import SandboxSpec

        spec = SandboxSpec(backend=self.defaults["sandbox"], limits=self.defaults["limits"])  # recovery needs no packages
        try:
            outcomes = await recover(spec, self.defaults["runs_dir"], backend=self.defaults["backend"])
        except Exception as exc:  # noqa: BLE001 - the server runs on; what failed is said
            print(f"coderoom: recovery failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return
        for outcome in outcomes:
            print(f"coderoom: {outcome.describe()}", file=sys.stderr, flush=True)

    async def __aexit__(self, *exc: object) -> None:
        await self.close_all()

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap(), name="coderoom-session-reaper")

    async def _reap(self) -> None:
        while True:
            graces = [grace for grace, _ in self._released.values()]
            interval = max(REAP_INTERVAL_MIN_S, min(REAP_INTERVAL_MAX_S, self.idle_timeout_s / 4, *(g / 4 for g in graces)))
            woken = asyncio.ensure_future(self._wake.wait())
            try:  # not wait_for: on 3.11 it can swallow a cancel that meets the wake (close_all waits)
                await asyncio.wait({woken}, timeout=interval)
            finally:
                woken.cancel()
            self._wake.clear()
            now = time.monotonic()
            for session in list(self._sessions.values()):
                if session.lost is not None:  # its node went away: said once on stderr, its reason kept for `get`
                    self._forget_lost(session)
                    continue
                left = self._released.get(session.id)
                gone = left is not None and now >= left[1] and not session.busy
                if gone or session.idle_for() > self.idle_timeout_s:
                    with contextlib.suppress(Exception):
                        await self.close(session.id)
                    if left is not None and gone and session.closed:
                        print(f"coderoom: session {session.id} closed and saved {left[0]:g} s after its client went away: "
                              f"{session.run_dir}", file=sys.stderr, flush=True)
            self._released = {sid: left for sid, left in self._released.items() if sid in self._sessions}

    def _forget_lost(self, session: LiveSession) -> None:
        self._sessions.pop(session.id, None)
        self._lost[session.id] = lost_message(session.id, session.lost or "", session.run_dir)
        while len(self._lost) > MAX_LOST_KEPT:
            del self._lost[next(iter(self._lost))]
