"""A client process for the vanished-client and the kill tests: opens a session on `coderoom mcp
--http` (or uses `--session ID`), prints `session ID`, makes the calls given in order (each
`TOOL ARGUMENTS-JSON`, the session id added), printing `answered TOOL` after each, and stays
connected. The test kills this process (SIGKILL) during a call or after, so its connections drop
with no DELETE and no cancellation, or kills the server under it.

Usage: python vanishing_client.py URL TOKEN MODE [--session ID] TOOL JSON [TOOL JSON ...];
MODE: the `mcp` Client's ("legacy": the 2025 wire, an MCP session with its Mcp-Session-Id and
event stream; "auto": the 2026 single-exchange wire the SDK's client picks by default)."""

from __future__ import annotations

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, token: str, mode: str, calls: list[str]) -> None:
    sid = None
    if calls[:1] == ["--session"]:
        sid, calls = calls[1], calls[2:]
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=600)
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        if sid is None:
            opened = await client.call_tool("open_session", {"uploads": {"input/x.txt": "aGk="}})
            sid = "\n".join(b.text for b in opened.content if b.type == "text").split()[1]
        print(f"session {sid}", flush=True)
        for tool, arguments in zip(calls[::2], calls[1::2]):
            await client.call_tool(tool, {"session_id": sid, **json.loads(arguments)})
            print(f"answered {tool}", flush=True)
        await asyncio.Event().wait()  # connected and idle until killed


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]))
