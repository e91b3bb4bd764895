"""The host end of init.py's command protocol, over the container's attached stdin/stdout.

One JSON object per line each way, replies matched to requests by id (see inside/init.py). A
reader thread parses the replies; a request waits on a future for its final reply, and a helper
request also gets its "data" replies handed, in the reader thread, to a sink as they arrive.
The stream is written by init.py, PID 1 of a hostile container (read through `frames`): a line
longer than any waiting request so far may get (its `reply_bytes`, base64 and JSON included), or
one that is not JSON, ends the channel.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from .frames import LINE_OVERHEAD, STDOUT, Lines, frames, line_bound

logger = logging.getLogger(__name__)

Reply = dict[str, Any]
Sink = Callable[[Reply], None]


class _Waiter:
    def __init__(self, loop: asyncio.AbstractEventLoop, sink: Sink | None, reply_bytes: int) -> None:
        self.loop = loop
        self.max_line = line_bound(reply_bytes)
        self.future: asyncio.Future[Reply] = loop.create_future()
        self.sink = sink


class Channel:
    """Requests to init.py and their replies; `closed_reason` says why it stopped, if it has."""

    def __init__(self, api: Any, container_id: str) -> None:
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        self._sock = api.attach_socket(container_id, params=params)
        self._raw = getattr(self._sock, "_sock", self._sock)
        self._send_lock = threading.Lock()
        self._waiters: dict[str, _Waiter] = {}
        self._waiters_lock = threading.Lock()
        self.closed_reason: str | None = None
        # the longest line allowed: the largest reply any request so far may get (a late reply
        # to a request the host stopped waiting for is still within it)
        self._line_cap = LINE_OVERHEAD
        self._reader = threading.Thread(
            target=self._pump, daemon=True, name=f"coderoom-docker-{container_id[:12]}"
        )
        self._reader.start()
        self._send(b"\n")  # tells init.py the host has attached (its --contact-within)

    async def call(
        self,
        request: Reply,
        *,
        wait: float | None,
        reply_bytes: int,
        sink: Sink | None = None,
        rid: str | None = None,
    ) -> Reply:
        """Send `request`; its final reply, or TimeoutError after `wait` seconds (None: no
        limit, for a live job whose end init.py enforces). `reply_bytes`: the most payload one
        reply line may carry (a command's two capped outputs). `rid`: the request's id, when
        the caller names it in later requests (a live job's stdin and kill)."""
        rid = rid or uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop, sink, reply_bytes)
        with self._waiters_lock:
            if self.closed_reason is not None:
                raise ConnectionError(self.closed_reason)
            self._waiters[rid] = waiter
            self._line_cap = max(self._line_cap, waiter.max_line)
        line = (json.dumps({**request, "id": rid}) + "\n").encode()
        try:
            if len(line) < 65536:
                self._send(line)
            else:
                await loop.run_in_executor(None, self._send, line)
            return await asyncio.wait_for(waiter.future, wait)
        finally:
            with self._waiters_lock:
                self._waiters.pop(rid, None)

    def notify(self, request: Reply) -> None:
        """Send `request` without waiting for its reply (dropped when it comes): for an
        operation whose answer changes nothing here ("keep")."""
        if self.closed_reason is not None:
            raise ConnectionError(self.closed_reason)
        self._send((json.dumps({**request, "id": uuid.uuid4().hex}) + "\n").encode())

    def close(self) -> None:
        self._fail_all("the channel was closed")
        try:
            self._sock.close()
        except OSError:
            pass

    def _send(self, line: bytes) -> None:
        with self._send_lock:
            self._raw.sendall(line)

    def _pump(self) -> None:
        lines = Lines()
        try:
            for stream, chunk in frames(self._raw.recv):
                if stream != STDOUT:
                    logger.warning("sandbox init: %s", bytes(chunk[:4096]).decode(errors="replace").rstrip())
                    continue
                for line in lines.feed(chunk, self._line_cap):
                    self._deliver(json.loads(line))
        except Exception as e:  # socket closed under us, or garbage on the stream
            logger.debug("sandbox channel reader stopped: %s", e)
        finally:
            self._fail_all("the sandbox's init process went away (container stopped or removed)")

    def _deliver(self, reply: Reply) -> None:
        with self._waiters_lock:
            waiter = self._waiters.get(str(reply.get("id")))
        if waiter is None:
            return
        if "data" in reply:
            if waiter.sink is not None:
                waiter.sink(reply)
            return
        waiter.loop.call_soon_threadsafe(_resolve, waiter.future, reply)

    def _fail_all(self, reason: str) -> None:
        with self._waiters_lock:
            if self.closed_reason is None:
                self.closed_reason = reason
            waiters = list(self._waiters.values())
        for waiter in waiters:
            waiter.loop.call_soon_threadsafe(_fail, waiter.future, ConnectionError(reason))


def _resolve(future: asyncio.Future[Reply], reply: Reply) -> None:
    if not future.done():
        future.set_result(reply)


def _fail(future: asyncio.Future[Reply], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
