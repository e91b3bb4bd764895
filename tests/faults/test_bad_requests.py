"""Malformed requests to `coderoom serve` change nothing (issue 20): a body that is not a whole
multipart form never opens a session or starts a sandbox, so a thousand of them leave the session
cap free; JSON nested too deeply for the decoder is a 400, not a 500 with a RecursionError; and
neither server logs a traceback when a signal stops it. A real server on 127.0.0.1, real HTTP."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from coderoom.web.bodies import MAX_JSON_BYTES
from mcp_process import start_http
from web.served import Served, multipart, serve

BAD_REQUESTS = 1000
MAX_SESSIONS = 2
SANDBOX_PREFIX = "coderoom-local-"


@pytest.fixture
def start(tmp_path: Path, tmpdir_for_sessions: Path) -> Iterator[Callable[[], Served]]:
    """`start()`: a `coderoom serve` on the local sandbox with sessions in the test's own TMPDIR;
    one a failed test left running is killed at the end."""
    started: list[Served] = []

    def start_one() -> Served:
        runs = tmp_path / "runs"
        runs.mkdir()
        started.append(serve(runs, "--sandbox", "local", "--max-sessions", str(MAX_SESSIONS),
                             env={"TMPDIR": str(tmpdir_for_sessions)}))
        return started[-1]

    yield start_one
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(30)


def _csrf(server: Served) -> dict[str, str]:
    return {"X-Coderoom-CSRF": json.loads(server.authed("GET", "/api/config").body)["csrf"]}


def _bad_open_bodies() -> list[tuple[str, dict[str, str], bytes]]:
    form_headers, form = multipart({"model": "offline"}, [("data.csv", b"a,b\n1,2\n" * 50)])
    unclosed = form[: form.rindex(b"--coderoom-test-boundary")]
    return [
        ("multipart cut in half", form_headers, form[: len(form) // 2]),
        ("multipart without its closing boundary", form_headers, unclosed),
        ("urlencoded", {"Content-Type": "application/x-www-form-urlencoded"}, b"model=offline&files=x"),
        ("urlencoded cut short", {"Content-Type": "application/x-www-form-urlencoded"}, b"model=offl"),
        ("JSON cut short", {"Content-Type": "application/json"}, b'{"model": "offline", "files": ['),
        ("no content type", {}, b""),
        ("multipart without a boundary", {"Content-Type": "multipart/form-data"}, form),
    ]


def _hang_up_mid_body(server: Served, csrf: dict[str, str]) -> None:
    """Send a multipart request's head and a part of its body, then close the connection."""
    form_headers, form = multipart({}, [("data.csv", b"x" * 5000)])
    head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": server.host, "Authorization": server.auth, **csrf, **form_headers,
                                                 "Content-Length": str(len(form))}.items())
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(f"POST /api/sessions HTTP/1.1\r\n{head}\r\n".encode() + form[:1000])


def _sandbox_folders(tmpdir: Path) -> list[Path]:
    return sorted(tmpdir.glob(SANDBOX_PREFIX + "*"))


def test_a_thousand_malformed_opens_start_no_sandbox_and_leave_the_cap_free(start: Callable[[], Served], tmpdir_for_sessions: Path) -> None:
    server = start()
    csrf = _csrf(server)
    bodies = _bad_open_bodies()
    for n in range(BAD_REQUESTS):
        name, headers, body = bodies[n % len(bodies)]
        reply = server.authed("POST", "/api/sessions", {**csrf, **headers}, body)
        assert reply.status == 400, (name, reply.status, reply.body[:200])
        assert b"error" in reply.body
    for _ in range(10):
        _hang_up_mid_body(server, csrf)
    time.sleep(0.5)  # the server has read what the hung-up clients sent
    assert json.loads(server.authed("GET", "/api/sessions").body) == []
    assert list(server.runs_dir.iterdir()) == [] and _sandbox_folders(tmpdir_for_sessions) == []
    form_headers, form = multipart({"model": "offline"}, [("data.csv", b"a,b\n1,2\n")])
    for _ in range(MAX_SESSIONS):  # every slot is still free
        assert server.authed("POST", "/api/sessions", {**csrf, **form_headers}, form).status == 200
    assert len(_sandbox_folders(tmpdir_for_sessions)) == MAX_SESSIONS
    assert server.stop() == 143
    stderr = server.process.stderr.read()
    assert "Traceback" not in stderr, stderr[-3000:]


def test_json_nested_too_deeply_or_too_large_is_refused_and_ctrl_c_logs_no_traceback(start: Callable[[], Served]) -> None:
    server = start()
    csrf = _csrf(server)
    form_headers, form = multipart({"model": "offline"}, [])
    session = json.loads(server.authed("POST", "/api/sessions", {**csrf, **form_headers}, form).body)["id"]
    ask = f"/api/sessions/{session}/ask"
    for body in (b"[" * 100_000, b'{"request": ' + b'{"a": ' * 20_000, b"[" * 3000 + b"]" * 3000):
        reply = server.authed("POST", ask, csrf, body)
        assert reply.status == 400 and b"nested too deeply" in reply.body, reply.body[:200]
    assert server.authed("POST", ask, csrf, b'{"request": "' + b"a" * MAX_JSON_BYTES + b'"}').status == 413
    assert server.authed("POST", ask, csrf, b'{"request": "cut').status == 400
    ended: list[Exception | None] = []

    def follow() -> None:
        try:
            server.authed("GET", f"/api/sessions/{session}/events")
            ended.append(None)
        except Exception as exc:  # noqa: BLE001  (what cut the stream is the finding)
            ended.append(exc)

    stream = threading.Thread(target=follow, daemon=True)
    stream.start()  # an event stream open at Ctrl-C
    time.sleep(1)
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(60) == 130
    stream.join(30)
    assert ended == [None]  # the stream ended whole when its session closed, not cut
    stderr = server.process.stderr.read()
    assert "Traceback" not in stderr and "RecursionError" not in stderr, stderr[-3000:]
    [run] = server.runs_dir.iterdir()
    assert (run / "run.jsonl").is_file()


async def test_mcp_over_http_logs_no_traceback_at_sigterm(tmp_path: Path) -> None:
    server = start_http("--sandbox", "local", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    try:
        async with server.client() as client:
            opened = await client.call_tool("open_session", {})
            assert not opened.is_error
            server.process.send_signal(signal.SIGTERM)
            assert server.process.wait(60) == 143
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait(30)
    stderr = "".join(server.stderr) + server.process.stderr.read()
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "closed and saved" in stderr
