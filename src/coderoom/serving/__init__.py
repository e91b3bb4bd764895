"""What every HTTP surface of coderoom shares (the page, `coderoom serve`, and MCP over HTTP,
`coderoom mcp --http`), written once so the two cannot drift apart:

* `bind`: the loopback rule (a non-loopback address needs `--allow-remote`, refused in one text)
  and the socket, bound before anything slow happens so a taken port is a usage error (exit 2);
* `guard`: the bearer token (constant-time), and the Host and Origin checks against DNS
  rebinding, each a small ASGI middleware;
* `server`: uvicorn without its own signal handlers (`interrupts` stops it: sessions closed and
  saved, exit 130/143/129) and with a shutdown that logs no traceback;
* `connections`: a deadline for each request head and a cap on connections under the
  open-files limit, so clients without a token cannot wedge a server;
* `ending`: the requests still in flight when a server stops, answered 503 and closed (or
  their responses ended whole), never cancelled into a traceback;
* `backends`: every offered sandbox backend prepared (Docker builds its image) before the
  socket listens, never on the server's event loop.
"""
