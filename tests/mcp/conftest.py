"""Start `coderoom mcp` as its users do (a subprocess) and talk to it with the `mcp` SDK's own
client: over stdio, or over streamable HTTP on loopback with the token it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp.client.stdio import StdioServerParameters

SRC = Path(__file__).resolve().parents[2] / "src"
START_TIMEOUT_S = 60.0


def server_env() -> dict[str, str]:
    """The server's environment: no model keys; this checkout's source first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}
    return {**env, "PYTHONPATH": os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])}


def stdio_server(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "coderoom", "mcp", *args], env=server_env())


@dataclass
class HttpServer:
    process: subprocess.Popen[str]
    url: str
    token: str
    stderr: list[str]


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator:
    """A factory: `start(*args)` runs `coderoom mcp --http --port 0 ARGS` and reads its URL and token."""
    started: list[HttpServer] = []

    def start(*args: str) -> HttpServer:
        process = subprocess.Popen(
            [sys.executable, "-m", "coderoom", "mcp", "--http", "--port", "0", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=server_env(), cwd=tmp_path,
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
        assert url and token, "".join(lines)
        server = HttpServer(process, url, token, lines)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(30)
