"""Attack pass D-F (2026-12-07) on the Docker fast path's engine client (`docker.engine`), spoken
to by a hostile fake engine on a Unix socket of the test's own: every answer is read within its
call's timeout in all, whatever the engine sends and however slowly (D-F5: a dribbling engine,
or one sending 100 Continue without end, held a call for ever: the timeout was per recv), chunk
sizes are plain hex (D-F7), and after a call cut short the next (the removal) starts afresh (D-F8).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coderoom.sandboxes.docker.engine import Engine, EngineError

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
Serve = Callable[[socket.socket], None]


class FakeEngine:
    """Answers each connection with the next of `behaviours` (each is given the connection after
    the request's bytes were read); gives up on a connection after HOLD_S at most."""

    HOLD_S = 20.0

    def __init__(self, folder: Path) -> None:
        self.path = str(folder / "engine.sock")
        self.behaviours: list[Serve] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(4)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                connection.recv(65536)
                if self.behaviours:
                    try:
                        self.behaviours.pop(0)(connection)
                    except OSError:
                        pass

    def close(self) -> None:
        self.stopped.set()
        self.server.shutdown(socket.SHUT_RDWR)  # wakes the accept (close alone does not)
        self.server.close()
        self.thread.join(timeout=self.HOLD_S + 5)


@pytest.fixture
def engine() -> Iterator[FakeEngine]:
    folder = Path(tempfile.mkdtemp(prefix="df-", dir="/tmp"))  # AF_UNIX paths are short
    fake = FakeEngine(folder)
    try:
        yield fake
    finally:
        fake.close()
        shutil.rmtree(folder)


def dribble(connection: socket.socket) -> None:
    connection.sendall(HEAD)
    deadline = time.monotonic() + FakeEngine.HOLD_S
    while time.monotonic() < deadline:
        connection.sendall(b"1\r\n \r\n")  # a byte of body every 0.1 s: each recv gets something
        time.sleep(0.1)


def endless_continue(connection: socket.socket) -> None:
    deadline = time.monotonic() + FakeEngine.HOLD_S
    while time.monotonic() < deadline:
        connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        time.sleep(0.01)


def answer(body: bytes) -> Serve:
    return lambda connection: connection.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )


@pytest.mark.parametrize("behaviour", [dribble, endless_continue], ids=["dribbling", "endless-100-continue"])
def test_an_answer_is_read_within_its_calls_timeout_in_all(engine: FakeEngine, behaviour: Serve) -> None:
    engine.behaviours = [behaviour, answer(b'{"Id": "next"}')]
    client = Engine(engine.path, timeout=2.0)
    with pytest.raises(TimeoutError):  # before: ConnectionError once the fake gave up, HOLD_S later
        client.call("GET", "/version")
    assert client.call("DELETE", "/containers/x?force=1") == {"Id": "next"}, "the removal starts afresh"
    client.close()


@pytest.mark.parametrize("size", [b"-5", b"+5", b"1_0", b" ", b"zz"])
def test_a_chunk_size_is_plain_hex(engine: FakeEngine, size: bytes) -> None:
    engine.behaviours = [lambda c: c.sendall(HEAD + size + b"\r\nabcdefgh\r\n0\r\n\r\n")]
    client = Engine(engine.path, timeout=5.0)
    with pytest.raises(EngineError, match="bad chunk size"):
        client.call("GET", "/version")
    client.close()
