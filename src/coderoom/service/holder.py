"""What `SessionManager`, the web page and the MCP server need of a live session, whoever holds
it: a `Session` in this process, or a `RaySession` whose session is a Ray actor on a cluster node
(`serve --ray`, `mcp --ray`). One interface, so neither server knows where a session runs; the
manager gets its sessions from an `Opener` (`Session.open` by default).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Literal, Protocol

from ..record.events import Event
from ..sandboxes.limits import Limits
from .session import AskResult, CellResult, CommandResult, FileInfo, MAX_READ_BYTES


class LiveSession(Protocol):
    """A live session (see `Session` for what each call does). `lost` is None while it can still
    be reached; once its node is gone, the reason, and every call raises `SessionLost`."""

    id: str
    run_dir: Path
    limits: Limits
    max_read_bytes: int
    lost: str | None

    @property
    def closed(self) -> bool: ...

    @property
    def busy(self) -> bool: ...

    def idle_for(self) -> float: ...

    def subscribe(self) -> AsyncIterator[Event]: ...

    async def ask(self, request: str) -> AskResult: ...

    async def run_python(self, code: str) -> CellResult: ...

    async def interrupt(self) -> bool: ...

    async def stop(self) -> Literal["ask", "cell"] | None: ...

    async def exec(self, command: str, timeout: float | None = None) -> CommandResult: ...

    async def write_file(self, path: str, data: bytes) -> None: ...

    async def read_file(self, path: str, max_bytes: int = MAX_READ_BYTES, *, head: bool = False) -> bytes: ...

    async def files(self, *, quiet: bool = False) -> list[FileInfo]: ...

    async def close(self, *, keep_unsaved: bool = True) -> Path: ...


Opener = Callable[..., Awaitable[LiveSession]]
"""Opens a live session from `Session.open`'s keyword arguments."""


def lost_message(session_id: str, cause: str, run_dir: Path) -> str:
    """What every call on a lost session says (`SessionLost`), from the session or the manager."""
    return (
        f"session {session_id} was lost: {cause}. Its record so far is in {run_dir} (ended 'lost'); "
        "its workspace and kernel were on that node and are gone"
    )
