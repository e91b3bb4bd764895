"""A real `coderoom serve` in a child process, on 127.0.0.1 and a free port, and plain HTTP to it.

Nothing is mocked: the server is the CLI command, the sessions are `coderoom.service`'s on the
local sandbox, the model is the offline analyst. Requests go to 127.0.0.1 only, through
`http.client` so a test can send any Host, Origin or Authorization it likes.
"""

from __future__ import annotations

import http.client
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

URL_LINE = re.compile(r"^coderoom serve: (http://127\.0\.0\.1:(\d+))/#token=([A-Za-z0-9_-]+)$")
START_TIMEOUT_S = 60


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Endpoint:
    """A server on 127.0.0.1:`port` with its token, however it was started."""

    port: int
    token: str
    runs_dir: Path

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def auth(self) -> str:
        """The Authorization header's value the page sends (the token is never in a cookie)."""
        return f"Bearer {self.token}"

    def request(self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None) -> Reply:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request(method, path, body=body, headers={"Host": self.host, **(headers or {})})
            response = connection.getresponse()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        finally:
            connection.close()

    def authed(self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None) -> Reply:
        return self.request(method, path, {"Authorization": self.auth, **(headers or {})}, body)


@dataclass
class Served(Endpoint):
    process: subprocess.Popen[str]
    base: str

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


COMMAND = (sys.executable, "-m", "coderoom")


def serve(runs_dir: Path, *args: str, command: tuple[str, ...] = COMMAND, env: dict[str, str] | None = None) -> Served:
    """Start `coderoom serve --port 0 --runs-dir RUNS_DIR ARGS` and wait for its URL line
    (`command`: how coderoom is started; `env`: added to the environment)."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "CODEROOM_MODEL")}, **(env or {})}
    process = subprocess.Popen(
        [*command, "serve", "--port", "0", "--runs-dir", str(runs_dir), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=runs_dir.parent,
    )  # fmt: skip
    assert process.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 1)
        if ready:
            line = process.stdout.readline()
            if not line:
                break
            match = URL_LINE.match(line.strip())
            if match:
                return Served(port=int(match[2]), token=match[3], runs_dir=runs_dir, process=process, base=match[1])
        elif process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"coderoom serve did not start: {process.stderr.read() if process.stderr else ''}")


def multipart(fields: dict[str, str], files: list[tuple[str, bytes]]) -> tuple[dict[str, str], bytes]:
    """A multipart/form-data body as a browser sends it: `fields`, then each (name, content) as `files`."""
    boundary = "coderoom-test-boundary-7f3a"
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for filename, content in files:
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        parts.append(head.encode() + content + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return {"Content-Type": f"multipart/form-data; boundary={boundary}"}, body
