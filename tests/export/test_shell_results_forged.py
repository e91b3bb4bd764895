"""A forged record's shell results are hostile data: absurd values (huge exit codes, negative or
infinite times, 10 MB commands and outputs, inconsistent states) are refused by the reader with
the line and the field named, before any export exists; control characters and shell syntax
reach the script only as literals and the notebook only as text; nothing recorded runs on the host."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from recorded_run import kernel_run  # noqa: F401 (fixture)
from typer.testing import CliRunner

from coderoom.cli import app
from coderoom.export.notebook import export_notebook
from coderoom.export.script import export_script

TEN_MB = 10 * 1024 * 1024
SHELL = {"status": "exited", "command": "true", "exit_code": 0, "wall_time_s": 0.1, "output": "", "output_chars": 0}


def forge(kernel_run: Path, target: Path, shell: dict[str, Any], **event: Any) -> Path:
    """A copy of the recorded run with one more exec_command result, its shell result `shell`."""
    shutil.copytree(kernel_run, target)
    lines = (target / "run.jsonl").read_text().splitlines()
    step = {"type": "tool_result", "call_id": "forged", "name": "exec_command", "arguments": {"cmd": "true"},
            "output": "", "shell": shell, **event}
    lines.insert(-1, json.dumps(step))
    (target / "run.jsonl").write_text("\n".join(lines) + "\n")
    return target


ABSURD = [
    ("exit_code", {"exit_code": 10**30}),
    ("exit_code", {"exit_code": -(2**40)}),
    ("wall_time_s", {"wall_time_s": -1.0}),
    ("wall_time_s", {"wall_time_s": float("inf")}),
    ("wall_time_s", {"wall_time_s": float("nan")}),
    ("command", {"command": "x" * TEN_MB}),
    ("output", {"output": "y" * TEN_MB}),
    ("output_chars", {"output_chars": -5}),
    ("session_id", {"status": "running", "exit_code": None, "session_id": -1}),
    ("status", {"status": "rm -rf ~"}),
    ("an exited command has an exit code", {"exit_code": None}),
    ("a running command has a session id", {"status": "running"}),
]


@pytest.mark.parametrize("field, values", ABSURD, ids=[f"{f}-{i}" for i, (f, _) in enumerate(ABSURD)])
def test_absurd_shell_values_are_refused_naming_the_line_and_field(
    kernel_run: Path, tmp_path: Path, field: str, values: dict[str, Any]
) -> None:
    forged = forge(kernel_run, tmp_path / "forged", {**SHELL, **values})
    line = len((forged / "run.jsonl").read_text().splitlines()) - 1
    target = tmp_path / "replay.py"
    result = CliRunner().invoke(app, ["export", str(forged), "--script", str(target)])
    said = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert f"line {line}: tool_result event: shell" in said and field in said
    assert not target.exists()


def test_control_characters_and_shell_syntax_stay_inert(
    kernel_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a command that ran on the host would leave its canary here
    command = "touch CANARY\x1b[2J\x00\r'''\"\"\"; $(touch CANARY2)"
    shell = {**SHELL, "command": command, "workdir": "out$(touch CANARY3)", "shell": "bash\ntouch CANARY4",
             "output": "\x1b]52;c;Zm9v\x07 \u202e done\x00"}
    forged = forge(kernel_run, tmp_path / "forged", shell)

    source = export_script(forged, tmp_path / "replay.py").read_text()
    assert "\x00" not in source and "\x1b" not in source
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Name) and node.func.id == "shell"]  # fmt: skip
    forged_call = next(call for call in calls if "CANARY" in ast.unparse(call))
    assert [arg.value for arg in forged_call.args] == [command]  # a literal, exactly the command
    assert {kw.arg: kw.value.value for kw in forged_call.keywords} == {  # type: ignore[attr-defined]
        "shell": "bash\ntouch CANARY4", "workdir": "out$(touch CANARY3)"}

    notebook = nbformat.read(export_notebook(forged, tmp_path / "nb.ipynb"), as_version=4)
    cell = next(c for c in notebook.cells if "CANARY" in c.source)
    assert cell.source.startswith("%%bash\ncd 'out$(touch CANARY3)' || exit\n")  # quoted; no shell from the record
    shown = subprocess.run([sys.executable, "-m", "coderoom", "show", str(forged)], capture_output=True, timeout=120)
    assert shown.returncode == 0 and b"\x1b]52" not in shown.stdout and b"\x00" not in shown.stdout
    assert not list(tmp_path.glob("CANARY*")) and not list(Path.cwd().glob("CANARY*"))


def test_huge_numbers_in_an_older_records_prose_are_not_read_as_numbers(kernel_run: Path, tmp_path: Path) -> None:
    """Python refuses to convert an integer of more than 4,300 digits: the legacy parser reads at
    most 9, and a header with more is text, not an exit code."""
    prose = f"Chunk ID: x\nWall time: 0.1 seconds\nProcess exited with code {'9' * 5000}\nOutput:\nhi\n"
    forged = forge(kernel_run, tmp_path / "forged", None, output=prose)  # type: ignore[arg-type]
    result = CliRunner().invoke(app, ["export", str(forged), "--script", str(tmp_path / "replay.py")])
    assert result.exit_code == 0, result.output
