"""`coderoom mcp`: coderoom's live sessions as an MCP server, for a calling agent that brings its
own model (and `run_job` for a whole coderoom run with the server's model).

`policy` says which host files a client may name; `content` turns sandbox output (hostile) into
bounded MCP content; `tools` builds the server on a `SessionManager`; `serve` runs it over stdio
or over streamable HTTP on loopback with a bearer token. Named `mcp_server`, not `mcp`, so it
never shadows the `mcp` SDK.
"""

RECONNECT_GRACE_S = 60.0
"""How long the sessions of an MCP HTTP client that went away wait for it (or any caller) to come
back (`presence`). Here, not in `presence`, so `coderoom mcp`'s option default costs the CLI no
import of starlette or anyio."""
