"""A client process for the vanished-client tests: opens a session on `coderoom mcp --http`
(or uses the one given), prints its id, makes one call and stays connected: the test kills this
process (SIGKILL) during the call or after it, so its connections drop with no DELETE and no
cancellation.

Usage: python vanishing_client.py URL TOKEN MODE TOOL ARGUMENT [SESSION_ID]; MODE: the `mcp`
Client's ("legacy": the 2025 wire, an MCP session with its Mcp-Session-Id and event stream;
"auto": the 2026 single-exchange wire the SDK's client picks by default)."""

from __future__ import annotations

import asyncio
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(url: str, token: str, mode: str, tool: str, argument: str, sid: str | None) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=600)
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        if sid is None:
            opened = await client.call_tool("open_session", {})
            sid = "\n".join(b.text for b in opened.content if b.type == "text").split()[1]
        print(f"session {sid}", flush=True)
        key = "code" if tool == "run_python" else "command"
        await client.call_tool(tool, {"session_id": sid, key: argument})
        print("answered", flush=True)
        await asyncio.Event().wait()  # connected and idle until killed


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6], sys.argv[6] if len(sys.argv) > 6 else None))
