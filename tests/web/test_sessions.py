"""Live sessions over HTTP, against the real server and the local sandbox: uploads checked before
any sandbox starts, a session's events streamed (the record so far, then live; on the page's
application served in process, over the fake backend: the sandbox is not what it tests), the
choices limited to what the server offers, and shutdown by a signal saving every session."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coderoom.record import read_record
from coderoom.web.live import MAX_EVENT_ID_DIGITS
from web.in_process import served_in_process
from web.served import Endpoint, Served, multipart, serve

SHOWCASE_CSV = Path(__file__).resolve().parents[2] / "examples" / "building_energy" / "data" / "building_energy.csv"


def _csrf(server: Endpoint) -> dict[str, str]:
    return {"X-Coderoom-CSRF": json.loads(server.authed("GET", "/api/config").body)["csrf"]}


def _open(server: Endpoint, files: list[tuple[str, bytes]], **fields: str) -> tuple[int, dict]:
    headers, body = multipart(fields, files)
    reply = server.authed("POST", "/api/sessions", {**_csrf(server), **headers}, body)
    return reply.status, json.loads(reply.body)


@pytest.mark.parametrize("name", ["../escape.csv", ".bashrc", "a/b.csv", "evil\u202etxt.csv", "x" * 200])
def test_an_upload_with_a_bad_name_opens_nothing(server: Served, name: str) -> None:
    before = set(os.listdir(server.runs_dir))
    status, reply = _open(server, [(name, b"a,b\n1,2\n")])
    assert status == 400 and "name" in reply["error"]
    assert set(os.listdir(server.runs_dir)) == before  # refused before any run folder exists


def test_a_model_or_sandbox_the_server_does_not_offer_is_refused(server: Served) -> None:
    before = set(os.listdir(server.runs_dir))
    for fields in ({"model": "openai:gpt-5.4"}, {"sandbox": "unix_local"}, {"model": "offline:x"}):
        status, reply = _open(server, [], **fields)
        assert status == 400 and "not one this server offers" in reply["error"], fields
    assert set(os.listdir(server.runs_dir)) == before


def _events(server: Endpoint, session_id: str, until: str, timeout_s: float = 120, last_id: int | str | None = None) -> list[dict]:
    """The session's SSE stream read until an event of type `until` arrives; each event gets its
    SSE id as `_id`."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout_s)
    headers = {"Host": server.host, "Authorization": server.auth}
    if last_id is not None:
        headers["Last-Event-ID"] = str(last_id)
    connection.request("GET", f"/api/sessions/{session_id}/events", headers=headers)
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("content-type", "").startswith("text/event-stream")
    events: list[dict] = []
    event_id = None
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            line = response.readline().decode().rstrip("\r\n")
            if line.startswith("id: "):
                event_id = int(line[4:])
            if line.startswith("data: "):
                events.append({**json.loads(line[6:]), "_id": event_id})
                if events[-1]["type"] == until:
                    return events
    finally:
        connection.close()
    raise AssertionError(f"no {until} event within {timeout_s} s: {[e['type'] for e in events]}")


@pytest.fixture
def server_on_fake(fake_backend: Any, tmp_path: Path) -> Iterator[Endpoint]:
    (tmp_path / "runs").mkdir()
    with served_in_process(tmp_path / "runs", fake_backend) as endpoint:
        yield endpoint


def test_a_session_streams_its_record_and_replays_it_to_a_late_reader(server_on_fake: Endpoint) -> None:
    server = server_on_fake
    status, opened = _open(server, [("building_energy.csv", SHOWCASE_CSV.read_bytes())], model="offline", sandbox="fake")
    assert status == 200, opened
    session = opened["id"]
    asked = server.authed("POST", f"/api/sessions/{session}/ask", {**_csrf(server), "Content-Type": "application/json"},
                          json.dumps({"request": "Find abnormal energy use in input/building_energy.csv"}).encode())  # fmt: skip
    assert asked.status == 202
    live = _events(server, session, until="ask_end")
    assert [e["type"] for e in live[:3]] == ["run_start", "file_written", "session_open"]
    assert live[2]["files"] == ["input/building_energy.csv"]
    assert "tool_result" in [e["type"] for e in live]
    # a second reader (a reloaded page) gets the same events from the record, each once
    late = _events(server, session, until="ask_end")
    assert [(e["type"], e["t"]) for e in late] == [(e["type"], e["t"]) for e in live]
    assert [e["_id"] for e in live] == list(range(1, len(live) + 1))  # ids are record line numbers
    # a browser that reconnects after event 5 gets the rest only
    resumed = _events(server, session, until="ask_end", last_id=5)
    assert [(e["_id"], e["type"]) for e in resumed] == [(e["_id"], e["type"]) for e in live[5:]]
    # W20: a Last-Event-ID no server gave (thousands of digits, non-ASCII digits) counts as none, not a 500
    for bogus in ("9" * 5000, "\u00b2\u00b3", "1" * (MAX_EVENT_ID_DIGITS + 1)):
        again_all = _events(server, session, until="ask_end", last_id=bogus)
        assert [e["_id"] for e in again_all] == [e["_id"] for e in live], bogus[:20]
    # a second ask while one runs is refused; after it, a follow-up is accepted
    headers = {**_csrf(server), "Content-Type": "application/json"}
    follow = server.authed("POST", f"/api/sessions/{session}/ask", headers, json.dumps({"request": "and now?"}).encode())
    assert follow.status == 202
    again = server.authed("POST", f"/api/sessions/{session}/ask", headers, json.dumps({"request": "and again?"}).encode())
    assert again.status in (202, 409)
    closed = server.authed("POST", f"/api/sessions/{session}/close", _csrf(server))
    assert closed.status == 200
    record = read_record(server.runs_dir / json.loads(closed.body)["run"])
    assert record.end is not None and not record.unfinished


def test_a_signal_ends_the_server_with_its_exit_code_and_saves_live_sessions(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    served = serve(runs)
    status, opened = _open(served, [("data.csv", b"a,b\n1,2\n")], model="offline", sandbox="local")
    assert status == 200, opened
    assert served.stop() == 143  # SIGTERM: 128 + 15
    record = read_record(runs / opened["run"])
    assert record.end is not None and record.end.status == "interrupted" and record.end.signal == "SIGTERM"
    assert (runs / opened["run"] / "workspace.tar").is_file()


def test_the_server_s_limits_and_warm_pool_are_what_every_session_gets(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    served = serve(runs, "--pool", "1", "--timeout", "7", "--memory", "700M", "--sandbox", "local")
    try:
        opened: dict = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the pool's first sandbox may still be starting
            status, opened = _open(served, [("data.csv", b"a,b\n1,2\n")], model="offline", sandbox="local")
            assert status == 200, opened
            record = read_record(runs / opened["run"])
            (session_open,) = [e for e in record.events if e.type == "session_open"]
            if session_open.pooled:
                break
            served.authed("POST", f"/api/sessions/{opened['id']}/close", _csrf(served))
        else:
            pytest.fail("no session was handed a warm sandbox within 120 s")
        limits = record.start.job["sandbox"]["limits"]
        assert (limits["timeout"], limits["memory"]) == (7, 700 * 1024 * 1024)
    finally:
        assert served.stop() == 143


@pytest.mark.parametrize("flags", [["--limit", "pids"], ["--limit", "nonsense=1"], ["--pool", "-1"], ["--memory", "lots"]])
def test_bad_session_settings_are_usage_errors_before_the_server_listens(tmp_path: Path, flags: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "coderoom", "serve", "--port", "0", *flags],
                            capture_output=True, text=True, cwd=tmp_path, timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "coderoom serve: http" not in result.stdout


def test_serve_help_does_not_import_the_agents_sdk(tmp_path: Path) -> None:
    probe = ("import sys\nfrom coderoom.cli import app\nsys.argv = ['coderoom', 'serve', '--help']\n"
             "try:\n    app()\nexcept SystemExit:\n    pass\n"
             "print('SDK', [m for m in sys.modules if m == 'agents' or m.startswith('agents.')])")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "--allow-remote" in done.stdout
    assert done.stdout.strip().endswith("SDK []")


def _record_events(run_dir: Path) -> list[Any]:
    try:
        return read_record(run_dir).events
    except (FileNotFoundError, ValueError):
        return []


def test_stop_ends_the_answer_the_record_says_stopped_and_the_session_goes_on(tmp_path: Path) -> None:
    """POST /stop (CSRF like every POST) during a sleeping cell: the ask ends 'stopped' at once,
    a follow-up runs in the same kernel, and the past runs list the request, not an internal string."""
    from openai_server import OpenAIServer, call, say

    runs = tmp_path / "runs"
    runs.mkdir()
    steps = [
        call("run_python", code="x = 41"),  # the kernel is up before the cell that will be stopped
        call("run_python", code="import time\ntime.sleep(120)"),
        call("run_python", code="print('x is', x + 1)"),
        say("x plus one is 42."),
    ]
    with OpenAIServer(steps) as model:
        served = serve(runs, "--model", f"openai-compatible:scripted@{model.url}", "--sandbox", "local")
        try:
            status, opened = _open(served, [], model=f"openai-compatible:scripted@{model.url}", sandbox="local")
            assert status == 200, opened
            session, run_dir = opened["id"], runs / opened["run"]
            stop_path = f"/api/sessions/{session}/stop"
            assert served.authed("POST", stop_path).status == 403  # no CSRF header
            assert json.loads(served.authed("POST", stop_path, _csrf(served)).body) == {"stopped": None}  # nothing runs
            headers = {**_csrf(served), "Content-Type": "application/json"}
            assert served.authed("POST", f"/api/sessions/{session}/ask", headers, json.dumps({"request": "Sleep a while"}).encode()).status == 202
            deadline = time.monotonic() + 120
            while len([e for e in _record_events(run_dir) if e.type == "tool_start"]) < 2:
                assert time.monotonic() < deadline, "the sleeping cell never started"
                time.sleep(0.1)
            time.sleep(1)  # the cell is in its sleep
            started = time.monotonic()
            stopped = served.authed("POST", stop_path, _csrf(served))
            assert (stopped.status, json.loads(stopped.body)) == (200, {"stopped": "ask"})
            ask_end = _events(served, session, until="ask_end")[-1]
            assert time.monotonic() - started < 30
            assert ask_end["status"] == "stopped" and "stopped on request" in ask_end["error"]
            listed = json.loads(served.authed("GET", "/api/sessions").body)
            assert [s["busy"] for s in listed if s["id"] == session] == [False]
            assert served.authed("POST", f"/api/sessions/{session}/ask", headers, json.dumps({"request": "And now?"}).encode()).status == 202
            deadline = time.monotonic() + 120
            while len([e for e in _record_events(run_dir) if e.type == "ask_end"]) < 2:
                assert time.monotonic() < deadline, "the follow-up did not end"
                time.sleep(0.1)
            assert served.authed("POST", f"/api/sessions/{session}/close", _csrf(served)).status == 200
            runs_listed = json.loads(served.authed("GET", "/api/runs").body)
        finally:
            served.stop()
    events = read_record(run_dir).events
    assert [(e.status, e.final_output) for e in events if e.type == "ask_end"] == [("stopped", ""), ("ok", "x plus one is 42.")]
    assert "x is 42" in [e for e in events if e.type == "tool_result"][-1].output  # the kernel kept x
    (listed_run,) = [r for r in runs_listed if r["name"] == run_dir.name]
    assert listed_run["request"] == "Sleep a while"  # the first request, not the session's internal prompt
