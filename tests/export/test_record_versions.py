"""Records written before typed events (version 1, kept in records_v1/: the same recorded session
as `recorded_run`, and a real run with a nudge, both written by that coderoom) read, show and
export as today's records do. Records of version 2 written before shell results were structured
(records_v2/: `recorded_run`'s session and one with a PTY session, polled with write_stdin) and
version 1 records export exactly as they did then: exported/ holds what that coderoom made."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from recorded_run import kernel_run  # noqa: F401 (fixture)
from typer.testing import CliRunner

from coderoom.cli import app
from coderoom.export.notebook import build_notebook, python_outputs
from coderoom.export.script import build_script
from coderoom.export.steps import load_steps
from coderoom.record import RECORD_VERSION, read_record

HERE = Path(__file__).parent
RECORDS_V1 = HERE / "records_v1"
EXPORTED = HERE / "exported"
OLD_RECORDS = ["records_v1/kernel_run", "records_v1/nudged_run", "records_v2/kernel_run", "records_v2/pty_run"]


def v1_run(name: str, tmp_path: Path) -> Path:
    return old_run(f"records_v1/{name}", tmp_path)


def old_run(name: str, tmp_path: Path) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir(parents=True)
    shutil.copy(HERE / f"{name}.jsonl", run_dir / "run.jsonl")
    return run_dir


@pytest.mark.parametrize("name", OLD_RECORDS)
def test_old_records_export_exactly_as_they_did(name: str, tmp_path: Path) -> None:
    run_dir = old_run(name, tmp_path)
    expected = EXPORTED / name.replace("/", "-")
    assert build_script(*load_steps(run_dir)) == expected.with_suffix(".script").read_text()
    cells = [{k: v for k, v in cell.items() if k != "id"} for cell in build_notebook(run_dir).cells]  # ids are random
    assert json.loads(json.dumps(cells)) == json.loads(expected.with_suffix(".cells.json").read_text())


def test_a_version_1_session_gives_the_same_steps_as_today(kernel_run: Path, tmp_path: Path) -> None:
    old_dir = v1_run("kernel_run", tmp_path)
    assert (read_record(old_dir).version, read_record(kernel_run).version) == (1, RECORD_VERSION)
    (_, old), (_, new) = load_steps(old_dir), load_steps(kernel_run)

    def essentials(step):
        cell = step.run
        return (step.kind, step.source, step.cell, cell and cell.status, step.images, step.lost_state,
                step.found_kernel_restarted, step.replayable, cell and cell.value,
                [o.output_type for o in python_outputs(step)] if step.kind == "python" else None)  # fmt: skip

    assert [essentials(s) for s in old] == [essentials(s) for s in new]
    python = [s for s in old if s.kind == "python"]
    assert python[0].run.value == "(336, 3)" and python[1].run.error.rstrip().endswith("KeyError: 'missing_column'")
    assert python[2].images == [".coderoom/figures/cell-3-1.png"]
    assert [s.status.split(" in ")[0] for s in python] == [
        "ok", "error", "ok", "interrupted (timeout)", "kernel crashed and was restarted", "ok"]  # fmt: skip
    assert "STATE LOST" in python[4].run.notes[0]


def test_a_version_1_session_replays_as_today(kernel_run: Path, tmp_path: Path) -> None:
    old_script = build_script(*load_steps(v1_run("kernel_run", tmp_path)))
    new_script = build_script(*load_steps(kernel_run))
    assert old_script.count("\n    python(") == new_script.count("\n    python(") == 4
    for line in ("# cell 4 not replayed: in the original run it was 'interrupted (timeout)'",
                 "    reset()  # the kernel lost its variables here"):  # fmt: skip
        assert line in old_script and line in new_script


@pytest.mark.parametrize("name", ["kernel_run", "nudged_run"])
def test_version_1_records_show_and_export(name: str, tmp_path: Path) -> None:
    run_dir = v1_run(name, tmp_path)
    runner = CliRunner()
    shown = runner.invoke(app, ["show", str(run_dir)])
    assert shown.exit_code == 0, shown.output
    assert "cell 1: ok in" in shown.output and "did not finish" not in shown.output
    exported = runner.invoke(app, ["export", str(run_dir), "--notebook", str(tmp_path / "n.ipynb")])
    assert exported.exit_code == 0, exported.output
    if name == "nudged_run":
        assert "nudge: output/note.md (missing" in shown.output and "run ok" in shown.output
