"""Live sessions for long-lived services: `Session` (a sandbox, its kernel, its workspace and a
conversation across requests, recorded as a run folder), `SessionManager` (a cap, an idle
timeout, shutdown) and `WarmPool` (sandboxes started ahead of need). The web page, the MCP
server and scripts all use these. Loaded on first use: importing them imports the Agents SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .manager import SessionManager
    from .pool import WarmPool
    from .session import AskResult, CellResult, CommandResult, FileInfo, Session

_LAZY = {
    "Session": ".session", "AskResult": ".session", "CellResult": ".session",
    "CommandResult": ".session", "FileInfo": ".session", "SessionManager": ".manager",
    "WarmPool": ".pool",
}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
