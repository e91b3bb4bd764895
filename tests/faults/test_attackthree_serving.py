"""Third pass (attackthree, 2026-12-02): `coderoom serve` against a local client with no token.

A real server on 127.0.0.1 under the common default soft limit of open files; the attacker sends
only the first bytes of request heads (no token ever), holds them, then lets go. Written as the
attack; fixed in `coderoom.serving` (connections, ending).
"""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from web.served import Served, serve

NOFILE = 256
"""The server's soft and hard limit of open files (1024 is the usual default; smaller is faster)."""
HELD = NOFILE + 50
REPLY_TIMEOUT_S = 10


@pytest.fixture
def low_fd_server(tmp_path: Path, tmpdir_for_sessions: Path) -> Iterator[Served]:
    runs = tmp_path / "runs"
    runs.mkdir()
    command = ("prlimit", f"--nofile={NOFILE}:{NOFILE}", sys.executable, "-m", "coderoom")
    server = serve(runs, "--sandbox", "local", command=command, env={"TMPDIR": str(tmpdir_for_sessions)})
    yield server
    if server.process.poll() is None:
        server.process.kill()
        server.process.wait(30)


def _config_status(server: Served) -> int | str:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=REPLY_TIMEOUT_S)
    try:
        connection.request("GET", "/api/config", headers={"Host": server.host, "Authorization": server.auth})
        return connection.getresponse().status
    except OSError as exc:
        return type(exc).__name__
    finally:
        connection.close()


def test_held_partial_heads_without_a_token_never_wedge_the_server(low_fd_server: Served) -> None:
    server = low_fd_server
    held = []
    for _ in range(HELD):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(b"GET / HTTP/1.1\r\nHo")  # never finished, never any token
        held.append(sock)
    time.sleep(2)
    for sock in held:
        sock.close()
    time.sleep(2)
    assert _config_status(server) == 200, "the token holder is served once the attacker let go"
    server.process.send_signal(signal.SIGTERM)
    try:
        code = server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = None
    assert code == 143, "SIGTERM ends the server as a signal should"


def _stderr_after_sigterm(process: subprocess.Popen[str], earlier: str = "") -> tuple[int | None, str]:
    process.send_signal(signal.SIGTERM)
    try:
        code: int | None = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        code = None
    assert process.stderr is not None
    return code, earlier + process.stderr.read()


def test_serve_stopped_while_a_form_is_still_arriving_logs_no_traceback(tmp_path: Path, tmpdir_for_sessions: Path) -> None:
    from web.served import multipart

    runs = tmp_path / "runs"
    runs.mkdir()
    server = serve(runs, "--sandbox", "local", env={"TMPDIR": str(tmpdir_for_sessions)})
    try:
        csrf = __import__("json").loads(server.authed("GET", "/api/config").body)["csrf"]
        form_headers, form = multipart({"model": "offline"}, [("data.csv", b"a,b\n1,2\n")])
        head = "".join(f"{k}: {v}\r\n" for k, v in {
            "Host": server.host, "Authorization": server.auth, "X-Coderoom-CSRF": csrf, **form_headers,
            "Content-Length": str(len(form))}.items())
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        slow.sendall(f"POST /api/sessions HTTP/1.1\r\n{head}\r\n".encode() + form[:-10])  # the rest never comes
        time.sleep(1)
        code, stderr = _stderr_after_sigterm(server.process)
        slow.close()
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(30)
    assert code == 143
    assert "Traceback" not in stderr, stderr[-3000:]
    assert list(tmpdir_for_sessions.iterdir()) == []


@pytest.mark.parametrize("held", ["event stream", "half a POST"])
def test_mcp_http_stopped_with_a_request_open_logs_no_traceback(tmp_path: Path, held: str) -> None:
    import json
    import re

    from mcp_process import start_http

    server = start_http("--sandbox", "local", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    try:
        url = re.match(r"http://(.+?):(\d+)(/.*)", server.url)
        assert url is not None
        host, port, path = f"{url[1]}:{url[2]}", int(url[2]), url[3]
        common = f"Host: {host}\r\nAuthorization: Bearer {server.token}\r\nAccept: application/json, text/event-stream\r\n"
        init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "a3", "version": "1"}}})
        with socket.create_connection(("127.0.0.1", port), timeout=30) as first:
            first.sendall((f"POST {path} HTTP/1.1\r\n{common}Content-Type: application/json\r\n"
                           f"Content-Length: {len(init)}\r\nConnection: close\r\n\r\n{init}").encode())
            reply = b""
            while chunk := first.recv(65536):
                reply += chunk
        found = re.search(rb"mcp-session-id: (\S+)", reply, re.I)
        assert found is not None, reply[:500]
        held_open = socket.create_connection(("127.0.0.1", port), timeout=30)
        if held == "event stream":
            held_open.sendall((f"GET {path} HTTP/1.1\r\n{common}mcp-session-id: {found[1].decode()}\r\n"
                               "mcp-protocol-version: 2025-06-18\r\n\r\n").encode())
        else:
            held_open.sendall((f"POST {path} HTTP/1.1\r\n{common}Content-Type: application/json\r\n"
                               "Content-Length: 100000\r\n\r\n{").encode())
        time.sleep(1)
        code, stderr = _stderr_after_sigterm(server.process, "".join(server.stderr))
        held_open.close()
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(30)
    assert code == 143
    assert "Traceback" not in stderr, stderr[-3000:]
