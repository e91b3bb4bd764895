"""Ray live-session pass (2026-12-06), the server's follower of a node's record without a cluster:
what `SessionActor.tail` hands back is record lines a sandbox's activity filled (a session's
egress lines, cell after cell), fed here to `RaySession._copy` as a node sends them. The copy
on this machine must stay a record `read_record` accepts, and a session lost after its record
filled must still end "lost". See docs/security.md "Ray live-session pass" (R-B).

The session is a real `RaySession` with no actor behind it: nothing here calls the node, and
`_lose` only ends the actor through `ray.kill` (a no-op stand-in).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from coderoom.errors import RunFolderUnavailable, SandboxFailed
from coderoom.record import read_record
from coderoom.record.events import Egress, RunStart
from coderoom.record.writer import encode
from coderoom.sandboxes.limits import Limits
from coderoom.service import ray_session
from coderoom.service.ray_session import RaySession

NO_ACTOR = SimpleNamespace(kill=lambda actor, no_restart=True: None)


def _session(tmp_path: Path) -> RaySession:
    run_dir = tmp_path / "runs" / "session-x"
    run_dir.mkdir(parents=True)
    return RaySession(NO_ACTOR, None, run_dir, Limits(), ("node", "127.0.0.1"), lambda: None)


def _node_lines(count: int) -> bytes:
    lines = [encode(RunStart(t=0.0, job={"task": "session"}))]
    lines += [encode(Egress(t=float(i), host="pypi.example", allowed=False, reason="not allowed")) for i in range(count)]
    return "".join(lines).encode("ascii")


async def test_a_lost_session_whose_record_reached_max_events_still_reads_and_ends_lost(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("coderoom.record.reader.MAX_EVENTS", 50)
    monkeypatch.setattr(ray_session, "MAX_EVENTS", 50)
    session = _session(tmp_path)
    session._copy(_node_lines(80))  # a sandbox that knocked on a closed door 80 times
    session._lose("its node went away")
    events = read_record(session.run_dir).events  # was: over MAX_EVENTS, "not a coderoom record"
    assert len(events) == 50
    assert (events[0].type, events[-1].type, events[-1].status) == ("run_start", "run_end", "lost")


async def test_a_lost_session_whose_record_reached_max_record_bytes_still_ends_lost(tmp_path, monkeypatch) -> None:
    cap = 40_000 + ray_session.END_ROOM_BYTES
    monkeypatch.setattr("coderoom.record.reader.MAX_RECORD_BYTES", cap)
    monkeypatch.setattr(ray_session, "MAX_RECORD_BYTES", cap)
    session = _session(tmp_path)
    session._copy(_node_lines(2_000))  # far more than the cap
    session._lose("its node went away")
    record = session.run_dir / "run.jsonl"
    assert record.stat().st_size <= cap
    events = read_record(session.run_dir).events
    assert (events[-1].type, events[-1].status) == ("run_end", "lost")  # was: no run_end at all


@pytest.mark.parametrize("line", [
    b"x" * (ray_session.MAX_LINE_BYTES + 1),  # over the record's line bound
    b'{"type": "run_end", "t": "soon"}',  # a forged end that is no event
    b"[" * 100_000 + b"]" * 100_000,  # nested past the parser's recursion
    b'{"type": "egress", "host": "\xff\xfe"}',  # not UTF-8
])
async def test_a_line_that_is_no_event_is_left_out_and_the_follower_goes_on(tmp_path, line: bytes) -> None:
    session = _session(tmp_path)
    session._copy(_node_lines(1) + line + b"\n" + encode(Egress(t=2.0)).encode("ascii"))
    events = read_record(session.run_dir).events
    assert [e.type for e in events] == ["run_start", "egress", "egress"] and not session._ended


@pytest.mark.parametrize("name", [
    "..", "../x", "/etc", "a/b", ".", "x" * 300,  # out of the runs folder, or no one name
    "\ud800",  # not encodable as a file name: was a UnicodeEncodeError out of the open (the page's 500)
    "session-1\nforged line", "\u202eexe.txt", ".coderoom-incoming-x",  # was: made on the driver as named
])
def test_a_run_folder_name_the_node_reports_is_one_coderoom_makes_or_the_open_fails(tmp_path, name: str) -> None:
    with pytest.raises(SandboxFailed, match="unsafe name"):
        ray_session._host_folder(tmp_path / "runs", name)
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


def test_a_run_folder_name_already_taken_on_the_driver_is_not_reused(tmp_path) -> None:
    (tmp_path / "runs" / "session-20261206-000000-abcdef").mkdir(parents=True)
    with pytest.raises(RunFolderUnavailable, match="File exists"):
        ray_session._host_folder(tmp_path / "runs", "session-20261206-000000-abcdef")
    assert ray_session._host_folder(tmp_path / "runs", "web-20261206-000000-abcdef").is_dir()


def test_a_session_s_small_call_and_heartbeat_deadlines_are_its_opener_s_setting_60_and_65_s_by_default(tmp_path: Path) -> None:
    from coderoom.service.on_node import TAIL_WAIT_S

    default = _session(tmp_path)
    assert (default._deadline("interrupt", ()), default._deadline("tail", (0,))) == (60.0, 65.0)
    assert default.tail_s == TAIL_WAIT_S + ray_session.CALL_S
    run_dir = tmp_path / "runs" / "session-y"
    run_dir.mkdir()
    short = RaySession(NO_ACTOR, None, run_dir, Limits(), ("node", "127.0.0.1"), lambda: None, call_s=20.0)
    assert (short._deadline("interrupt", ()), short._deadline("tail", (0,))) == (20.0, 20.0 + TAIL_WAIT_S)


def test_an_opener_refuses_a_small_call_deadline_of_no_time_and_a_negative_grace() -> None:
    with pytest.raises(ValueError, match="call_s"):
        ray_session.RayOpener({}, call_s=0)
    with pytest.raises(ValueError, match="busy_grace_s"):
        ray_session.RayOpener({}, busy_grace_s=-1)
