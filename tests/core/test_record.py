"""The run record: typed events written as one ASCII line each, read back whole whatever the sandbox
printed, and a cut, malformed or unfinished record said so instead of silently shortened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents.testing import assistant_message, function_call
from test_run import job, scripted, shell  # noqa: F401 (fixture)
from typer.testing import CliRunner

from coderoom.cli import app
from coderoom.errors import RecordError
from coderoom.record import RECORD_VERSION, Recorder, read_record
from coderoom.record import reader
from coderoom.record.events import MAX_TABLE_TEXT_CHARS, RunEnd, ToolResult
from coderoom.run import run_job

# Characters str.splitlines() breaks on besides \n; a sandbox prints any of them at will.
CUTTERS = "\u2028\u2029\x85\r\x1c\x1d\x1e\x0b\x0c"


async def test_line_breaking_characters_from_the_sandbox_do_not_cut_the_record(job, tmp_path: Path) -> None:
    printed = "".join(f"{c}after-{ord(c):x}" for c in CUTTERS)
    model = scripted(
        shell(f"printf '%s' '{printed}'", "c1"),
        [function_call("run_python", {"code": f"print({printed!r})"}, call_id="c2")],
        shell("mkdir -p output && cp input/x.csv output/copy.csv && echo n > output/note.md", "c3"),
        [assistant_message(f"Done{CUTTERS}really.")],
    )
    result = await run_job(job, run_dir=tmp_path / "run", model=model)
    assert result.ok, result.error
    raw = (tmp_path / "run/run.jsonl").read_bytes()
    assert raw.isascii() and not any(c.encode() in raw for c in CUTTERS)
    record = read_record(tmp_path / "run")
    assert len(record.events) == raw.count(b"\n") and record.unfinished is None
    results = [e for e in record.events if isinstance(e, ToolResult)]
    assert [r.call_id for r in results] == ["c1", "c2", "c3"]
    assert printed in results[0].output
    assert results[1].cell is not None and results[1].cell.stdout == printed + "\n"
    end = record.events[-1]
    assert isinstance(end, RunEnd) and end.status == "ok" and end.final_output == f"Done{CUTTERS}really."


def _record(tmp_path: Path, *lines: str) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    (run_dir / "run.jsonl").write_text("".join(lines), encoding="utf-8")
    return run_dir


START = json.dumps({"type": "run_start", "t": 0, "record_version": 2, "job": {"name": "j", "prompt": "p"}}) + "\n"
RESULT = json.dumps({"type": "tool_result", "t": 1, "call_id": "c1", "name": "exec_command",
                     "arguments": {"cmd": "ls"}, "output": "a\u2028b"}, ensure_ascii=False) + "\n"  # fmt: skip
END = json.dumps({"type": "run_end", "t": 2, "status": "ok"}) + "\n"


def test_raw_separators_in_an_older_record_are_read_through(tmp_path: Path) -> None:
    record = read_record(_record(tmp_path, START, RESULT, END))
    assert [e.type for e in record.events] == ["run_start", "tool_result", "run_end"]
    assert record.events[1].output == "a\u2028b"


def test_a_record_cut_after_a_tool_result_is_an_unfinished_run(tmp_path: Path) -> None:
    run_dir = _record(tmp_path, START, RESULT)
    record = read_record(run_dir)
    assert record.unfinished and "no run_end" in record.unfinished
    runner = CliRunner()
    shown = runner.invoke(app, ["show", str(run_dir)])
    assert shown.exit_code == 0 and "run did not finish" in shown.output and "exec_command" in shown.output
    for command in (["export", str(run_dir), "--script", str(tmp_path / "x.py")],
                    ["rerun", str(run_dir), "--out", str(tmp_path / "again")]):  # fmt: skip
        refused = runner.invoke(app, command)
        assert refused.exit_code == 2, refused.output
        assert "the run did not finish" in " ".join(refused.output.split())
    assert not (tmp_path / "x.py").exists() and not (tmp_path / "again").exists()


def test_a_last_line_cut_mid_write_is_reported_not_dropped(tmp_path: Path) -> None:
    run_dir = _record(tmp_path, START, RESULT, END[:20])
    record = read_record(run_dir)
    assert len(record.events) == 2 and record.unfinished == "line 3 is cut short: the run was killed while writing it"
    shown = CliRunner().invoke(app, ["show", str(run_dir)])
    assert shown.exit_code == 0 and "line 3 is cut short" in " ".join(shown.output.split())


def test_a_malformed_line_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="line 2 is not valid JSON"):
        read_record(_record(tmp_path, START, "{not json\n", END))
    with pytest.raises(RecordError, match=r"line 2: tool_result event: call_id: Field required"):
        read_record(_record(tmp_path, START, RESULT.replace('"call_id": "c1", ', ""), END))
    bad_figure = json.dumps({"type": "tool_result", "call_id": "c", "name": "run_python", "cell": {
        "number": 1, "status": "ok", "figures": ["../../etc/passwd"]}}) + "\n"  # fmt: skip
    with pytest.raises(RecordError, match="not a kernel figure path"):
        read_record(_record(tmp_path, START, bad_figure, END))
    shown = CliRunner().invoke(app, ["show", str(_record(tmp_path, START, "[1]\n", END))])
    assert shown.exit_code == 2 and "line 2 is not an event" in shown.output


def _table_result(**table: object) -> str:
    shown = {"kind": "DataFrame", "rows": 2, "columns": 2, "header": ["a", "b"], "index": ["0", "1"],
             "data": [["1", "2"], ["3", "4"]], **table}  # fmt: skip
    return json.dumps({"type": "tool_result", "call_id": "c", "name": "run_python", "cell": {
        "number": 1, "status": "ok", "value": "the text preview", "table": shown}}) + "\n"  # fmt: skip


def test_a_cells_table_is_read_within_its_bounds_and_a_forged_one_refused(tmp_path: Path) -> None:
    record = read_record(_record(tmp_path, START, _table_result(), END))
    table = record.events[1].cell.table  # type: ignore[union-attr]
    assert table is not None and table.header == ["a", "b"] and table.data == [["1", "2"], ["3", "4"]]
    older = read_record(_record(tmp_path, START, _table_result().replace('"table"', '"not_known"'), END))
    assert older.events[1].cell.table is None and older.events[1].cell.value == "the text preview"  # type: ignore[union-attr]
    forged = {
        "a cell over 200 characters": ({"data": [["x" * (MAX_TABLE_TEXT_CHARS + 1), "2"], ["3", "4"]]}, "at most 200 characters"),
        "a name over 200 characters": ({"header": ["a", "b" * 201]}, "at most 200 characters"),
        "more than 50 rows": ({"rows": 51, "index": ["i"] * 51, "data": [["1", "2"]] * 51}, "at most 50 items"),
        "more than 20 columns": ({"columns": 21, "header": ["h"] * 21, "data": [["1"] * 21] * 2}, "at most 20 items"),
        "a ragged row": ({"data": [["1", "2"], ["3"]]}, "one value per column"),
        "more rows shown than it has": ({"rows": 1}, "no more rows or columns than its shape"),
        "a negative shape": ({"rows": -1}, "greater than or equal to 0"),
        "a number for a cell": ({"data": [[1, "2"], ["3", "4"]]}, "valid string"),
        "a shape as text": ({"columns": "2"}, "valid integer"),
        "another kind": ({"kind": "Image"}, "DataFrame"),
    }
    for what, (table_fields, message) in forged.items():
        with pytest.raises(RecordError, match=rf"line 2: tool_result event: cell\.table.*{message}"):
            read_record(_record(tmp_path, START, _table_result(**table_fields), END))
            pytest.fail(f"read a table with {what}")


def test_an_oversized_line_is_refused_by_the_named_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 4096)
    long = RESULT.replace('"a\u2028b"', json.dumps("x" * 5000))
    with pytest.raises(RecordError, match=r"line 2 is over 4096 bytes \(MAX_LINE_BYTES\)"):
        read_record(_record(tmp_path, START, long, END))


def test_unknown_event_types_are_skipped_and_counted(tmp_path: Path) -> None:
    future = json.dumps({"type": "sandbox_metrics", "t": 1, "cpu": 3}) + "\n"
    run_dir = _record(tmp_path, START, future, RESULT, future, END)
    record = read_record(run_dir)
    assert record.skipped == 2 and [e.type for e in record.events] == ["run_start", "tool_result", "run_end"]
    shown = CliRunner().invoke(app, ["show", str(run_dir)])
    assert "2 events of types this coderoom does not know were skipped" in " ".join(shown.output.split())


def test_a_record_must_start_with_a_version_this_coderoom_reads(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="line 1 is a 'tool_result' event, not run_start"):
        read_record(_record(tmp_path, RESULT, END))
    newer = START.replace(f'"record_version": {RECORD_VERSION}', f'"record_version": {RECORD_VERSION + 1}')
    with pytest.raises(RecordError, match=f"reads versions 1 to {RECORD_VERSION}"):
        read_record(_record(tmp_path, newer, END))


def test_the_writer_writes_only_valid_events(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "run")
    recorder.emit("run_start", job={"name": "j"}, model="m")
    with pytest.raises(TypeError, match="tool_result events have no field images"):
        recorder.emit("tool_result", call_id="c", name="n", images=[])
    with pytest.raises(ValueError, match="turn"):
        recorder.emit("model_start", turn="first")
    recorder.close()
    lines = (tmp_path / "run/run.jsonl").read_text().split("\n")
    assert json.loads(lines[0])["record_version"] == RECORD_VERSION and lines[1:] == [""]
