"""A small client of the Docker Engine API over its Unix socket, for the CLI's fast path (`plain`).

docker-py with requests and urllib3 took about 400 ms of a whole `sandbox run --sandbox docker`
to import; the five calls a one-shot sandbox makes (version, create, attach, start, remove) need
no more than HTTP/1.1 over an AF_UNIX socket (`_Answers` reads the engine's answers: http.client
would bring email's parser and ssl, about a tenth of this path's imports) and, for the attach, the
connection taken over raw (`Upgrade: tcp`), as the docker CLI does. Paths carry no API version: the engine then speaks
its own, which is what docker-py's `from_env` negotiates too. Only a local engine is spoken to:
DOCKER_HOST naming anything but a Unix socket leaves the run to docker-py (`socket_path`).
Answers are bounded (MAX_ANSWER) before they are parsed, and in time: each is read within the
Engine's timeout in all (`_Answers.deadline`), not each recv (an engine dribbling bytes, or
sending 100 Continue without end, held a call for ever).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

DEFAULT_SOCKET = "/var/run/docker.sock"
MAX_ANSWER = 1 << 20
MAX_HEAD = 65536
CALL_TIMEOUT_S = 60.0  # docker-py's default per call


class EngineError(Exception):
    """The engine answered `status` to a call (its own message in `message`)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status, self.message = status, message


def socket_path(environ: Mapping[str, str]) -> str | None:
    """The engine's Unix socket as docker-py's `from_env` finds it; None for any other DOCKER_HOST
    (TCP, SSH, TLS settings), which only docker-py speaks."""
    host = environ.get("DOCKER_HOST", "")
    if not host:
        return DEFAULT_SOCKET
    if host.startswith("unix://") and host != "unix://" and not environ.get("DOCKER_TLS_VERIFY"):
        return host.removeprefix("unix://")
    return None


class Engine:
    """Calls to the engine at `path`, one kept-alive connection for them (not thread-safe); a
    call cut short (an error, or a signal's exception) or an answer left unread drops it, so the
    next starts afresh."""

    def __init__(self, path: str, timeout: float = CALL_TIMEOUT_S) -> None:
        self.path, self.timeout = path, timeout
        self._answers: _Answers | None = None
        self._unread = False  # a call was sent on the connection and its answer not yet read

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """The parsed JSON answer (None when it has none); EngineError for a status of 400 or
        more; OSError when the engine cannot be reached."""
        return self.send(method, path, body)()

    def send(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Callable[[], Any]:
        """Send a call now and return what reads its answer, as `call` does: the engine works on
        it while the caller does something else (`plain` loads its modules meanwhile). Read it
        before the next call on this Engine; OSError here when the engine cannot be reached."""
        data = b"" if body is None else json.dumps(body).encode()
        kind = "Content-Type: application/json\r\n" if body is not None else ""
        head = f"{method} {path} HTTP/1.1\r\nHost: docker\r\n{kind}Content-Length: {len(data)}\r\n\r\n"
        if self._unread:  # an answer left unread (a signal came between the send and the read)
            self.close()
        try:
            if self._answers is None:
                self._answers = _Answers(self._connect())
            answers = self._answers
            answers.sock.settimeout(self.timeout)  # the last answer's read left its own
            answers.sock.sendall(head.encode() + data)
            self._unread = True
        except BaseException:  # a signal or an error mid-call: the next call (the removal) reconnects
            self.close()
            raise
        return lambda: self._answer(answers, bodiless=method == "HEAD")

    def _answer(self, answers: _Answers, *, bodiless: bool) -> Any:
        try:
            if answers is not self._answers:  # dropped since it was sent
                raise ConnectionError("the engine connection was closed before its answer was read")
            answers.deadline = time.monotonic() + self.timeout
            status, headers, raw = answers.read(bodiless=bodiless)
        except BaseException:
            self.close()
            raise
        self._unread = False
        if answers.spent or headers.get("connection", "").lower() == "close":
            self.close()
        if len(raw) > MAX_ANSWER:
            self.close()  # what is left of an oversized answer must not be read as the next one
            raise EngineError(status, f"an answer over {MAX_ANSWER} bytes")
        parsed = json.loads(raw) if raw and headers.get("content-type", "").startswith("application/json") else None
        if status >= 400:
            message = parsed.get("message") if isinstance(parsed, dict) else raw[:500].decode(errors="replace")
            raise EngineError(status, str(message))
        return parsed

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
        except BaseException:
            sock.close()
            raise
        return sock

    def attach(self, container_id: str) -> tuple[socket.socket, Callable[[int], bytes]]:
        """A new connection attached to the container's stdin, stdout and stderr (a created
        container: what is sent before it starts waits in its stdin), and its `recv`, which
        hands out first what came in with the answer's headers."""
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            raw.settimeout(self.timeout)
            raw.connect(self.path)
            raw.sendall(
                f"POST /containers/{container_id}/attach?stream=1&stdin=1&stdout=1&stderr=1 HTTP/1.1\r\n"
                "Host: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: 0\r\n\r\n".encode()
            )
            answers = _Answers(raw)
            answers.deadline = time.monotonic() + self.timeout
            try:
                status, _ = answers.head()
            except ConnectionError:
                raise EngineError(0, "the attach answer ended before its headers") from None
            if status not in (101, 200):
                raise EngineError(status, f"the attach was answered {status}")
        except BaseException:
            raw.close()
            raise
        return raw, _replaying(answers.rest(), raw)

    def close(self) -> None:
        if self._answers is not None:
            self._answers.sock.close()
            self._answers = None
        self._unread = False


def _replaying(early: bytes, raw: socket.socket) -> Callable[[int], bytes]:
    """`raw.recv`, after the bytes that arrived with the headers."""
    pending = [early] if early else []

    def recv(size: int) -> bytes:
        if pending:
            data = pending.pop()
            if len(data) > size:
                pending.append(data[size:])
            return data[:size]
        return raw.recv(size)

    return recv


class _Answers:
    """HTTP/1.1 answers read off a kept-alive connection: the status, the headers (names in
    lower case) and the body, by Content-Length, chunked, or to the end of the connection. No
    more than MAX_ANSWER + 1 bytes of a body are kept (the caller refuses such an answer and drops
    the connection), nor more than MAX_HEAD bytes of headers; no recv waits past `deadline`
    (TimeoutError)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.spent = False  # an answer read to the end of the connection: nothing more comes
        self.deadline: float | None = None  # set by the caller for each answer
        self._buffer = b""

    def read(self, *, bodiless: bool = False) -> tuple[int, dict[str, str], bytes]:
        while True:  # 1xx answers (100 Continue) come before the real one
            status, headers = self.head()
            if not 100 <= status < 200:
                break
        if bodiless or status in (204, 304):
            return status, headers, b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return status, headers, self._chunked()
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise EngineError(status, f"an answer with Content-Length {length[:40]!r}")
            return status, headers, self._exactly(min(int(length), MAX_ANSWER + 1))
        return status, headers, self._to_end()

    def head(self) -> tuple[int, dict[str, str]]:
        """The next answer's status and headers; what came after them stays in `rest()`."""
        head = self._line_block()
        status_line, *lines = head.split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise EngineError(0, f"not an HTTP answer: {status_line[:80]!r}")
        headers = {}
        for line in lines:
            name, sep, value = line.partition(b":")
            if sep:
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        return int(parts[1]), headers

    def _line_block(self) -> bytes:
        while b"\r\n\r\n" not in self._buffer:
            if len(self._buffer) > MAX_HEAD:
                raise EngineError(0, f"an answer's headers over {MAX_HEAD} bytes")
            self._fill()
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        return head

    def _line(self) -> bytes:
        while b"\r\n" not in self._buffer:
            if len(self._buffer) > MAX_HEAD:
                raise EngineError(0, "a chunk size line too long")
            self._fill()
        line, _, self._buffer = self._buffer.partition(b"\r\n")
        return line

    def _chunked(self) -> bytes:
        body = b""
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16) if size_text.isalnum() else -1  # no sign, no "_"
            except ValueError:
                size = -1
            if size < 0:
                raise EngineError(0, f"a bad chunk size {size_text[:40]!r}")
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return body
            if len(body) + size > MAX_ANSWER:
                return body + self._exactly(MAX_ANSWER + 1 - len(body))  # refused and dropped by `call`
            body += self._exactly(size)
            self._line()  # the chunk's CRLF

    def rest(self) -> bytes:
        """What has been received past what was read (a raw stream's first bytes)."""
        data, self._buffer = self._buffer, b""
        return data

    def _exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def _to_end(self) -> bytes:
        self.spent = True
        while len(self._buffer) <= MAX_ANSWER:
            piece = self._recv()
            if not piece:
                break
            self._buffer += piece
        data, self._buffer = self._buffer[: MAX_ANSWER + 1], b""
        return data

    def _recv(self) -> bytes:
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the engine's answer took longer than its call's timeout")
            self.sock.settimeout(left)
        return self.sock.recv(65536)

    def _fill(self) -> None:
        piece = self._recv()
        if not piece:
            raise ConnectionError("the engine closed the connection mid-answer")
        self._buffer += piece
