"""A live session's activity, whoever holds it (`Session` here, `RaySession` on a cluster node):
whether it is closed or busy, how long it has been idle, and its record's subscribers. The idle
reaper and the servers read these the same way for both, so they are written once."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from ..record.events import Event
from .events import EventHub


class Activity:
    """The state behind `holder.LiveSession`'s `closed`, `busy`, `idle_for` and `subscribe`."""

    def __init__(self, hub: EventHub) -> None:
        self._hub = hub
        self._active = 0  # requests in flight
        self._closed = False
        self.last_used = time.monotonic()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def busy(self) -> bool:
        """A request is in flight: the idle reaper leaves the session alone."""
        return self._active > 0

    def idle_for(self) -> float:
        return 0.0 if self.busy else time.monotonic() - self.last_used

    def subscribe(self) -> AsyncIterator[Event]:
        """The record's events from now on, as they are written, until run_end (see EventHub)."""
        return self._hub.subscribe()
