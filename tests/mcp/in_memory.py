"""The MCP server coderoom builds (`build_server` over a `SessionManager`), reached by the `mcp`
SDK's client in memory, on a backend handed in: for tests of the tools, not of the sandbox or
the transport (those start `coderoom mcp` itself, see conftest)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp import Client

from coderoom.mcp_server.policy import ReadPolicy
from coderoom.mcp_server.tools import ServerSettings, build_server
from coderoom.sandboxes.limits import Limits
from coderoom.service import SessionManager


@contextlib.asynccontextmanager
async def in_memory_client(backend: Any, runs_dir: Path, *, model: str | None = None, **manager: Any) -> AsyncIterator[Client]:
    """A client of the server `coderoom mcp --runs RUNS_DIR` builds, its sessions on `backend`;
    `manager` as SessionManager's (max_sessions, idle_timeout_s). Every session closed at the end."""
    limits = Limits()
    sessions = SessionManager(limits=limits, sandbox=backend.name, model=model, runs_dir=runs_dir, backend=backend, **manager)
    server = build_server(sessions, ServerSettings(model, backend.name, limits, runs_dir, ReadPolicy([])))
    async with sessions, Client(server) as client:
        yield client
