"""`coderoom mcp --http` as a subprocess, with the URL and token it prints, for the MCP and the
fault suites."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

SRC = Path(__file__).resolve().parents[1] / "src"
START_TIMEOUT_S = 60.0


def server_env() -> dict[str, str]:
    """The server's environment: no model keys; this checkout's source first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}
    return {**env, "PYTHONPATH": os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])}


@dataclass
class HttpServer:
    process: subprocess.Popen[str]
    url: str
    token: str
    stderr: list[str]

    def client(self, token: str | None = "") -> Client:
        """An MCP client sending `token` (default: the server's; None: no Authorization header)."""
        token = self.token if token == "" else token
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return Client(streamable_http_client(self.url, http_client=httpx2.AsyncClient(headers=headers, timeout=120)))


COMMAND = (sys.executable, "-m", "coderoom")


def start_http(*args: str, cwd: Path, command: tuple[str, ...] = COMMAND) -> HttpServer:
    """Run `coderoom mcp --http --port 0 ARGS` and wait for its URL and token on stderr
    (`command`: how coderoom is started)."""
    process = subprocess.Popen(
        [*command, "mcp", "--http", "--port", "0", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=server_env(), cwd=cwd,
    )
    lines: list[str] = []
    url = token = None
    deadline = time.monotonic() + START_TIMEOUT_S
    while (url is None or token is None) and time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        if found := re.search(r"listening on (http://\S+)", line):
            url = found.group(1)
        if found := re.search(r"token: (\S+)", line):
            token = found.group(1)
    if not (url and token):
        process.kill()
        raise AssertionError("coderoom mcp did not start: " + "".join(lines))
    return HttpServer(process, url, token, lines)


CLIENT = Path(__file__).with_name("vanishing_client.py")


def start_client(server: HttpServer, mode: str, *calls: str) -> tuple[subprocess.Popen[str], str]:
    """A client process (`vanishing_client.py`: MODE, then TOOL JSON pairs) once it has opened its
    session; and the session id. It prints `answered TOOL` after each call, then idles until killed."""
    process = subprocess.Popen([sys.executable, str(CLIENT), server.url, server.token, mode, *calls],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=server_env())
    line = process.stdout.readline()
    if not line.startswith("session "):
        process.kill()
        raise AssertionError("the client opened no session: " + process.stderr.read())
    return process, line.split()[1]
