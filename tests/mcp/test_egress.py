"""An MCP call that made connections says so: `exec` and `run_python` results name each
connection attempt of that call through the egress allowlist's proxy (host, port, allowed or
refused and why, bytes each way, time), as structured content and as text, in the same reading
as `coderoom show` (`record.notes.egress_row`); a call that made none has an empty list."""

from __future__ import annotations

from pathlib import Path

from mcp import Client

from conftest import stdio_server
from egress.upstreams import http_upstream

FETCH = (
    "import urllib.request, sys\n"
    "for host in ('api.test', 'other.test'):\n"
    "    try:\n"
    "        print(host, urllib.request.urlopen(f'http://{host}:{sys.argv[1]}/ok', timeout=60).status)\n"
    "    except Exception as exc:\n"
    "        print(host, type(exc).__name__)\n"
)


async def test_exec_and_run_python_results_name_the_connections_of_that_call(tmp_path: Path) -> None:
    with http_upstream() as seen:
        port = seen.port
        params = stdio_server("--runs", str(tmp_path / "runs"), "--sandbox", "local", "--timeout", "60",
                              "--allow-host", f"api.test:{port}", "--resolve", "api.test=127.0.0.1",
                              "--resolve", "other.test=127.0.0.1")
        async with Client(params) as client:
            opened = await client.call_tool("open_session", {"uploads": {}})
            sid = opened.structured_content["session_id"]
            await client.call_tool("write_file", {"session_id": sid, "path": "fetch.py", "text": FETCH})
            # the proxy reports a connection when it ends: the command waits a moment after its last
            ran = await client.call_tool("exec", {"session_id": sid, "command": f"python3 fetch.py {port} && sleep 2"})
            quiet = await client.call_tool("run_python", {"session_id": sid, "code": "1 + 1"})
            # the kernel keeps the way out its sandbox was given (it scrubs its environment)
            code = f"import urllib.request, time\nprint(urllib.request.urlopen('http://api.test:{port}/kernel', timeout=60).status)\ntime.sleep(2)"
            fetched = await client.call_tool("run_python", {"session_id": sid, "code": code})
            await client.call_tool("close_session", {"session_id": sid})

    assert not ran.is_error, ran.content
    assert ran.structured_content["stdout"].splitlines() == ["api.test 200", "other.test HTTPError"]
    allowed, refused = ran.structured_content["connections"]
    assert allowed["host"] == "api.test" and allowed["port"] == port and allowed["outcome"] == "allowed"
    assert allowed["bytes_up"] > 0 and allowed["bytes_down"] > 0 and allowed["address"].startswith("127.0.0.1")
    assert refused["host"] == "other.test" and refused["outcome"] == "refused" and "other.test" in refused["reason"]
    assert refused["bytes_down"] == 0 and refused["address"] == ""
    text = ran.content[0].text
    assert "[connections]" in text and f"api.test:{port} via 127.0.0.1" in text
    assert f"other.test:{port} refused: " in text

    assert quiet.structured_content["connections"] == [] and "[connections]" not in quiet.content[0].text
    assert not fetched.is_error and fetched.structured_content["status"] == "ok", fetched.content
    (kernel_call,) = fetched.structured_content["connections"]
    assert kernel_call["host"] == "api.test" and kernel_call["outcome"] == "allowed"
    assert [path for path, _ in seen.requests] == ["/ok", "/kernel"]
