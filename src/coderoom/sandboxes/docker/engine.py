"""A small client of the Docker Engine API over its Unix socket, for the CLI's fast path (`plain`).

docker-py with requests and urllib3 took about 400 ms of a whole `sandbox run --sandbox docker`
to import; the five calls a one-shot sandbox makes (version, create, attach, start, remove) need
no more than http.client over an AF_UNIX socket and, for the attach, the connection taken over
raw (`Upgrade: tcp`), as the docker CLI does. Paths carry no API version: the engine then speaks
its own, which is what docker-py's `from_env` negotiates too. Only a local engine is spoken to:
DOCKER_HOST naming anything but a Unix socket leaves the run to docker-py (`socket_path`).
Answers are bounded (MAX_ANSWER) before they are parsed.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Callable, Mapping
from typing import Any

DEFAULT_SOCKET = "/var/run/docker.sock"
MAX_ANSWER = 1 << 20
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


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("docker", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class Engine:
    """Calls to the engine at `path`, one kept-alive connection for them (not thread-safe); a
    call cut short (an error, or a signal's exception) drops it, so the next starts afresh."""

    def __init__(self, path: str, timeout: float = CALL_TIMEOUT_S) -> None:
        self.path, self.timeout = path, timeout
        self._connection = _UnixConnection(path, timeout)

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """The parsed JSON answer (None when it has none); EngineError for a status of 400 or
        more; OSError when the engine cannot be reached."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            self._connection.request(method, path, body=data, headers=headers)
            answer = self._connection.getresponse()
            raw = answer.read(MAX_ANSWER + 1)
        except BaseException:  # a signal or an error mid-call: the next call (the removal) reconnects
            self.close()
            raise
        if len(raw) > MAX_ANSWER:
            self.close()  # what is left of an oversized answer must not be read as the next one
            raise EngineError(answer.status, f"an answer over {MAX_ANSWER} bytes")
        parsed = json.loads(raw) if raw and answer.getheader("Content-Type", "").startswith("application/json") else None
        if answer.status >= 400:
            message = parsed.get("message") if isinstance(parsed, dict) else raw[:500].decode(errors="replace")
            raise EngineError(answer.status, str(message))
        return parsed

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
            head = b""
            while b"\r\n\r\n" not in head:
                piece = raw.recv(4096)
                if not piece or len(head) > 65536:
                    raise EngineError(0, "the attach answer ended before its headers")
                head += piece
            head, _, early = head.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            if status not in (101, 200):
                raise EngineError(status, head[:500].decode(errors="replace"))
        except BaseException:
            raw.close()
            raise
        return raw, _replaying(early, raw)

    def close(self) -> None:
        self._connection.close()


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
