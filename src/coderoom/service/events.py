"""`EventHub`: a live session's record events, fanned out to subscribers as they are written.

Why bounded queues that drop the oldest: the web page streams a session's events (SSE) to a
browser that may be slow or gone; the run must never wait for it, and its memory must not grow
with it. A subscriber that falls more than SUBSCRIBER_QUEUE events behind loses the oldest and
gets one `events_lost` event (with the count) in their place; the record itself has them all.
The count is of record events only: a dropped LIVE_ONLY event (a reply's progress) has no line in
the record, and the page numbers its events by record line (attack W-S04).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from ..record.events import LIVE_ONLY, Event, EventsLost

SUBSCRIBER_QUEUE = 1000  # events one subscriber may be behind before the oldest are dropped


class _Subscriber:
    def __init__(self) -> None:
        self.queue: deque[Event] = deque(maxlen=SUBSCRIBER_QUEUE)
        self.lost = 0
        self.ready = asyncio.Event()

    def put(self, event: Event) -> None:
        if len(self.queue) == self.queue.maxlen and self.queue[0].type not in LIVE_ONLY:
            self.lost += 1  # the deque drops the oldest itself
        self.queue.append(event)
        self.ready.set()


class EventHub:
    """Recorder listener (`publish`) on one side, any number of `subscribe` iterators on the other."""

    def __init__(self) -> None:
        self._subscribers: set[_Subscriber] = set()
        self._closed = False

    def publish(self, event: Event) -> None:
        for subscriber in self._subscribers:
            subscriber.put(event)

    def close(self) -> None:
        """The record ended: every subscriber gets what is queued, then its iterator stops."""
        self._closed = True
        for subscriber in self._subscribers:
            subscriber.ready.set()

    async def subscribe(self) -> AsyncIterator[Event]:
        """Events from now on, in order, until the session's record ends (run_end included)."""
        subscriber = _Subscriber()
        self._subscribers.add(subscriber)
        try:
            while True:
                if subscriber.queue:
                    if subscriber.lost:
                        lost, subscriber.lost = subscriber.lost, 0
                        yield EventsLost(count=lost, t=subscriber.queue[0].t)
                    yield subscriber.queue.popleft()
                    continue
                if self._closed:
                    return
                subscriber.ready.clear()
                await subscriber.ready.wait()
        finally:
            self._subscribers.discard(subscriber)
