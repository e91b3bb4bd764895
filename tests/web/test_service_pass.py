"""Findings of the service attack pass on `coderoom serve`, each against the real server: a
forged huge record neither freezes the server nor is read whole for a page view (W03), a full
server refuses an upload before reading it (W19), zip names mean the same files on Windows
(W14), names with bidi or zero-width characters are shown as escapes (W15), a name over 255
UTF-8 bytes is refused before anything is made (W09)."""

from __future__ import annotations

import io
import json
import os
import threading
import time
import zipfile
from pathlib import Path
from urllib.parse import quote

import pytest

from coderoom.web.runs import MAX_SHOWN_RECORD_BYTES
from coderoom.web.view import bounded
from web.served import Served, multipart, serve

RLO = "\u202e"


def _csrf(server: Served) -> dict[str, str]:
    return {"X-Coderoom-CSRF": json.loads(server.authed("GET", "/api/config").body)["csrf"]}


def _forge_big_record(runs_dir: Path, name: str, size: int) -> None:
    run = runs_dir / name
    run.mkdir()
    pad = "x" * (1024 * 1024)
    with open(run / "run.jsonl", "w") as handle:
        handle.write(json.dumps({"type": "run_start", "t": 0, "record_version": 2, "model": "m",
                                 "job": {"name": "j", "prompt": "p", "inputs": {}, "outputs": []}}) + "\n")
        for i in range(size // len(pad)):
            handle.write(json.dumps({"type": "tool_result", "t": 1 + i * 1e-6, "call_id": "c", "name": "exec_command",
                                     "arguments": {"cmd": "x"}, "output": pad}) + "\n")
        handle.write(json.dumps({"type": "run_end", "t": 9, "status": "failed"}) + "\n")


def test_a_huge_forged_record_is_read_in_part_and_off_the_event_loop(server: Served) -> None:
    _forge_big_record(server.runs_dir, "big-record", 3 * MAX_SHOWN_RECORD_BYTES)
    replies: list[int] = []

    def view() -> None:
        replies.append(server.authed("GET", "/api/runs/big-record").status)

    heavy = [threading.Thread(target=view) for _ in range(4)]
    for thread in heavy:
        thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    assert server.authed("GET", "/api/config").status == 200
    answered_in = time.monotonic() - started
    for thread in heavy:
        thread.join(120)
    assert replies == [200] * 4
    assert answered_in < 1.0, answered_in  # the event loop kept answering while records were read
    record = json.loads(server.authed("GET", "/api/runs/big-record").body)
    assert 0 < len(record["events"]) < MAX_SHOWN_RECORD_BYTES // (1024 * 1024) + 1
    notes = " ".join(record["notes"])
    assert f"first {MAX_SHOWN_RECORD_BYTES:,} bytes" in notes and "status failed" in notes


def test_zip_names_mean_the_same_files_on_windows(server: Served) -> None:
    run = server.runs_dir / "windows-names"
    (run / "output").mkdir(parents=True)
    for name in ("..\\..\\Users\\Public\\evil.bat", "C:\\x", "CON.txt", "same.txt", "SAME.txt", "ok.csv"):
        (run / "output" / name).write_text(name)
    (run / "run.jsonl").write_text("")
    reply = server.authed("GET", "/api/runs/windows-names/zip")
    assert reply.status == 200
    with zipfile.ZipFile(io.BytesIO(reply.body)) as archive:
        names = archive.namelist()
        note = archive.read("coderoom-left-out.txt").decode() if "coderoom-left-out.txt" in names else ""
    assert not [n for n in names if "\\" in n or ":" in n], names
    assert "output/.._.._Users_Public_evil.bat" in names and "output/C__x" in names and "output/_CON.txt" in names
    assert "output/ok.csv" in names
    assert len([n for n in names if n.lower() == "output/same.txt"]) == 1 and "same.txt" in note.lower()


def test_bidi_and_zero_width_characters_are_shown_as_escapes(server: Served) -> None:
    run = server.runs_dir / "bidi-names"
    (run / "output").mkdir(parents=True)
    (run / "output" / f"invoice{RLO}fdp.exe").write_text(f"hello{RLO}olleh\u200b\n")
    (run / "run.jsonl").write_text(json.dumps({"type": "run_start", "t": 0, "record_version": 2, "model": f"m{RLO}x",
                                               "job": {"name": "j", "prompt": "p", "inputs": {}, "outputs": []}}) + "\n")
    [listed] = json.loads(server.authed("GET", "/api/runs/bidi-names/files").body)["files"][:1]
    assert listed["path"] == f"output/invoice{RLO}fdp.exe"  # the name to ask for, as it is
    assert listed["shown"] == "output/invoice\\u202efdp.exe"  # the name to show
    preview = json.loads(server.authed("GET", f"/api/runs/bidi-names/preview?path={quote(listed['path'])}").body)
    assert preview["text"] == "hello\\u202eolleh\\u200b\n"
    download = server.authed("GET", f"/api/runs/bidi-names/file?path={quote(listed['path'])}")
    assert "%E2%80%AE" not in download.headers["content-disposition"]
    record = json.loads(server.authed("GET", "/api/runs/bidi-names").body)
    assert record["events"][0]["model"] == "m\\u202ex"
    assert bounded({f"k{RLO}": ["v\u2066"]}) == {"k\\u202e": ["v\\u2066"]}


def test_a_name_over_255_bytes_is_refused_before_anything_is_made(server: Served) -> None:
    before = set(os.listdir(server.runs_dir))
    headers, body = multipart({}, [("\u3042" * 90 + ".csv", b"a\n")])  # 94 characters, 274 bytes
    reply = server.authed("POST", "/api/sessions", {**_csrf(server), **headers}, body)
    assert reply.status == 400 and "255 bytes" in json.loads(reply.body)["error"]
    assert set(os.listdir(server.runs_dir)) == before


@pytest.fixture
def one_session_server(tmp_path: Path):
    runs = tmp_path / "runs"
    runs.mkdir()
    served = serve(runs, "--max-sessions", "1", "--sandbox", "local")
    yield served
    served.stop()


def test_a_full_server_refuses_an_upload_before_reading_it(one_session_server: Served) -> None:
    server = one_session_server
    headers, body = multipart({}, [("a.csv", b"a\n")])
    first = server.authed("POST", "/api/sessions", {**_csrf(server), **headers}, body)
    assert first.status == 200, first.body
    # a bad name is a 400 once read; a full server answers 429 first, having read nothing
    headers, body = multipart({}, [("../bad.csv", b"a\n")])
    full = server.authed("POST", "/api/sessions", {**_csrf(server), **headers}, body)
    assert full.status == 429 and "max_sessions" in json.loads(full.body)["error"]
    session = json.loads(first.body)["id"]
    assert server.authed("POST", f"/api/sessions/{session}/close", _csrf(server)).status == 200
    again = server.authed("POST", "/api/sessions", {**_csrf(server), **headers}, body)
    assert again.status == 400
