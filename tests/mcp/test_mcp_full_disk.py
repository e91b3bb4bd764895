"""A full runs disk through MCP and serve: close_session and open_session answer isError with
a message naming the disk (no traceback), the unsaved session stays open and closes once space
returns; serve answers such an error with 507. The server's tools in memory, a real local sandbox."""

from __future__ import annotations

from pathlib import Path

from coderoom.errors import SaveFailed
from coderoom.sandboxes.registry import get_backend
from coderoom.web.app import _coderoom_error
from full_disk import DISK, fill, small_disk  # noqa: F401 (a fixture)
from in_memory import in_memory_client
from test_mcp import session_id, text_of


async def test_mcp_and_serve_report_the_full_disk(small_disk: Path) -> None:
    runs = small_disk / "runs"
    async with in_memory_client(get_backend("local"), runs) as client:
        sid = session_id(await client.call_tool("open_session", {"uploads": {"big.bin": "QUJD" * 300_000}}))
        filler = fill(small_disk)
        closing = await client.call_tool("close_session", {"session_id": sid})
        assert closing.is_error and DISK in text_of(closing) and "stays open" in text_of(closing)
        opening = await client.call_tool("open_session", {})
        assert opening.is_error and DISK in text_of(opening) and "Traceback" not in text_of(opening)
        assert len(list(runs.iterdir())) == 1
        filler.unlink()
        closed = await client.call_tool("close_session", {"session_id": sid})
        assert not closed.is_error, text_of(closed)
    response = await _coderoom_error(None, SaveFailed(f"{DISK} /runs"))  # type: ignore[arg-type]
    assert response.status_code == 507
