"""Start `coderoom mcp` as its users do (a subprocess) and talk to it with the `mcp` SDK's own
client: over stdio, or over streamable HTTP on loopback with the token it prints."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp.client.stdio import StdioServerParameters

from mcp_process import HttpServer, server_env, start_http


def stdio_server(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "coderoom", "mcp", *args], env=server_env())


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[Callable[..., HttpServer]]:
    """A factory: `start(*args)` runs `coderoom mcp --http --port 0 ARGS`; killed at the end."""
    started: list[HttpServer] = []

    def start(*args: str) -> HttpServer:
        started.append(start_http(*args, cwd=tmp_path))
        return started[-1]

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(30)
