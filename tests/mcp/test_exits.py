"""The exit policy through the real MCP server (a `coderoom mcp` subprocess and the `mcp` SDK's
client): a session's sandbox plants every form under output/; `read_file` and both resource
templates refuse each, `list_files` says which are kept in, the resource listing leaves them out,
and the run folder the session leaves holds none of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from conftest import stdio_server
from support.planted import GIT_CONFIGS, REFUSED, leaked, plant_script
from test_mcp import session_id, text_of


async def test_no_planted_form_leaves_through_mcp(tmp_path: Path) -> None:
    async with Client(stdio_server("--runs", str(tmp_path / "runs"))) as client:
        sid = session_id(await client.call_tool("open_session", {}))
        planted = await client.call_tool("exec", {"session_id": sid, "command": plant_script("output")})
        assert "exit code: 0" in text_of(planted), text_of(planted)
        for name in REFUSED:
            read = await client.call_tool("read_file", {"session_id": sid, "path": f"output/{name}"})
            assert read.is_error, name
        for name in GIT_CONFIGS:
            read = await client.call_tool("read_file", {"session_id": sid, "path": f"output/{name}"})
            assert "exit policy" in text_of(read), name
            with pytest.raises(Exception, match="exit policy"):
                await client.read_resource(f"coderoom://session/{sid}/output/{name}")
        listing = text_of(await client.call_tool("list_files", {"session_id": sid}))
        assert "output/src/commondir\tleft out: " in listing and "output/kept.csv\n" in listing + "\n"
        resources = {str(r.uri) for r in (await client.list_resources()).resources}
        assert f"coderoom://session/{sid}/output/kept.csv" in resources
        assert [n for n in REFUSED if f"coderoom://session/{sid}/output/{n}" in resources] == []
        closed = text_of(await client.call_tool("close_session", {"session_id": sid}))
        run_dir = Path(closed.split("run folder: ")[1].strip())
        kept = await client.read_resource(f"coderoom://run/{run_dir.name}/output/kept.csv")
        assert kept.contents[0].blob or kept.contents[0].text
    assert leaked(run_dir, "output") == [] and (run_dir / "output/kept.csv").is_file()
