"""Export a recorded run as a notebook and as a model-free script; rerun it on new data. The
exporters read the record and the saved workspace, not the sandbox: their run is recorded on the
fake backend (`kernel_run_on_fake`); rerun replays on a real one."""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from PIL import Image
from recorded_run import OUTPUTS, kernel_run, kernel_run_on_fake, write_energy_csv  # noqa: F401 (fixture)
from typer.testing import CliRunner

from coderoom.cli import app
from coderoom.errors import RecordError, UsageError
from coderoom.export.notebook import export_notebook
from coderoom.export.rerun import rerun
from coderoom.export.script import export_script, literal
from coderoom.export.steps import load_steps


def tar_member(run_dir: Path, name: str) -> bytes:
    with tarfile.open(run_dir / "workspace.tar") as archive:
        for member in archive.getmembers():
            if member.name.removeprefix("./") == name:
                handle = archive.extractfile(member)
                assert handle is not None
                return handle.read()
    raise KeyError(name)


def test_notebook_is_valid_and_in_order(kernel_run_on_fake: Path, tmp_path: Path) -> None:
    target = tmp_path / "run.ipynb"
    result = CliRunner().invoke(app, ["export", str(kernel_run_on_fake), "--notebook", str(target)])
    assert result.exit_code == 0, result.output
    notebook = nbformat.read(str(target), as_version=4)
    nbformat.validate(notebook)
    assert "**Warning:** this notebook runs the code recorded" in notebook.cells[0].source
    assert "untrusted" in notebook.cells[0].source

    _, steps = load_steps(kernel_run_on_fake)
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    expected = [s for s in steps if s.kind in ("python", "shell")]
    assert len(code_cells) == len(expected) == 8
    for cell, step in zip(code_cells, expected):
        assert step.source in cell.source
    assert code_cells[0].source.startswith("%%bash\nmkdir -p output")
    assert code_cells[4].source.startswith("%%bash\ncd output || exit\nprintf")  # shell quoting (shlex), not Python's

    load, missing, analysis = code_cells[1:4]
    assert [c.execution_count for c in (load, missing, analysis)] == [1, 2, 3]
    assert load.outputs[0].output_type == "execute_result"
    assert load.outputs[0].data["text/plain"] == "(336, 3)"
    error = next(o for o in missing.outputs if o.output_type == "error")
    assert error.ename == "KeyError" and "'missing_column'" in error.evalue

    figure = next(o for o in analysis.outputs if o.output_type == "display_data")
    png = base64.b64decode(figure.data["image/png"])
    assert png == tar_member(kernel_run_on_fake, ".coderoom/figures/cell-3-1.png")
    assert Image.open(io.BytesIO(png)).size == (600, 300)

    messages = [c.source for c in notebook.cells if c.metadata.get("coderoom", {}).get("kind") == "message"]
    assert messages == [f"Step {n}: using {name}." for n, name in enumerate(
        ["exec_command", "run_python", "run_python", "run_python", "exec_command", "run_python",
         "view_image", "run_python", "run_python"], 1)]  # fmt: skip
    viewed = next(c for c in notebook.cells if c.metadata.get("coderoom", {}).get("tool") == "view_image")
    assert base64.b64decode(viewed.attachments["image.png"]["image/png"]) == (kernel_run_on_fake / "output/plot.png").read_bytes()
    crashed = code_cells[-2]
    assert "STATE LOST" in "".join(o.get("text", "") for o in crashed.outputs)


def replay_in(workspace: Path, script: Path, data: Path) -> subprocess.CompletedProcess[str]:
    (workspace / "input").mkdir(parents=True)
    shutil.copy(data, workspace / "input" / "energy.csv")
    return subprocess.run(
        [sys.executable, str(script)], check=False, cwd=workspace, capture_output=True, text=True, timeout=120
    )


def test_script_reproduces_the_outputs(kernel_run_on_fake: Path, tmp_path: Path) -> None:
    script = export_script(kernel_run_on_fake, tmp_path / "replay.py")
    source = script.read_text()
    assert "WARNING: this script runs the code recorded in a coderoom run, as it is, wherever you start it." in source
    assert "untrusted" in source.split("Replay of the coderoom run")[0]
    assert "# cell 4 not replayed: in the original run it was 'interrupted (timeout)'" in source
    assert "# cell 5 not replayed" in source and "reset()  # the kernel lost its variables here" in source
    done = replay_in(tmp_path / "ws", script, kernel_run_on_fake.parent / "energy.csv")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "KeyError" in done.stderr  # the failing cell fails again, and the replay goes on
    for path in ("output/anomalies.csv", "output/report.md", "output/state.txt"):
        assert (tmp_path / "ws" / path).read_bytes() == (kernel_run_on_fake / path).read_bytes(), path
    assert (tmp_path / "ws/output/state.txt").read_text() == "False"  # variables lost, as in the run
    replayed = Image.open(tmp_path / "ws/output/plot.png")
    assert replayed.size == Image.open(kernel_run_on_fake / "output/plot.png").size


def test_record_text_cannot_end_a_comment_and_add_code(kernel_run: Path, tmp_path: Path) -> None:
    """A forged record's tool name lands in a comment; a newline or a lone CR there (Python ends
    a comment at either) must not turn the rest into a statement. A forged cell status is not
    even read: the record's cell statuses are a closed set."""
    forged = tmp_path / "forged"
    shutil.copytree(kernel_run, forged)
    lines = (forged / "run.jsonl").read_text().splitlines()
    by_name = {"type": "tool_result", "call_id": "f1", "name": "x\nPWNED_BY_NAME = 1\rPWNED_BY_CR = 1",
               "arguments": {}, "output": ""}
    lines[-1:-1] = [json.dumps(by_name)]
    (forged / "run.jsonl").write_text("\n".join(lines) + "\n")
    source = export_script(forged, tmp_path / "replay.py").read_text()
    names = {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}
    assert "PWNED_BY_NAME" not in names and "PWNED_BY_CR" not in names
    assert "PWNED_BY_NAME" in source and "PWNED_BY_CR" in source  # shown, as comments
    by_status = {"type": "tool_result", "call_id": "f2", "name": "run_python", "arguments": {"code": "1"},
                 "output": "", "cell": {"number": 9, "status": "no\rPWNED_BY_STATUS = 1"}}
    lines[-1:-1] = [json.dumps(by_status)]
    (forged / "run.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match="status"):
        export_script(forged, tmp_path / "replay2.py")


def test_script_literals_round_trip() -> None:
    for text in ["plain", "ends with quote'", "has ''' inside", "back\\slash\\", "cr\r\nlf", "tab\tand\x00nul", "é ✓"]:
        assert eval(literal(text)) == text


def test_rerun_applies_the_analysis_to_new_data(kernel_run: Path, tmp_path: Path) -> None:
    new = write_energy_csv(tmp_path / "new.csv", spikes=[5, 50, 90, 150, 250])
    out = tmp_path / "rerun"
    result = CliRunner().invoke(
        app,
        ["rerun", str(kernel_run), "--input", f"{new}=input/energy.csv", "--out", str(out), "--sandbox", "local"],
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(new)
    expected = frame[frame["energy_kwh"] > frame["energy_kwh"].mean() + 2 * frame["energy_kwh"].std()]
    got = pd.read_csv(out / "output/anomalies.csv")
    assert got["timestamp"].tolist() == expected["timestamp"].tolist() and len(got) == 5
    assert (out / "output/report.md").read_text() == "spikes: 5\n"
    assert sorted(p.relative_to(out).as_posix() for p in (out / "output").iterdir()) == sorted(OUTPUTS)
    log = (out / "replay.log").read_text()
    assert "337 input/energy.csv" in log  # the replay read its input (14 days of hours + header)
    assert "--- python cell 2" in log and all(f"ok      {path}" in log for path in OUTPUTS)


def test_rerun_reports_a_missing_input_and_a_foreign_directory(kernel_run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(app, ["rerun", str(kernel_run), "--input", f"{tmp_path}/nope.csv=input/energy.csv"])
    # a missing input is a usage error, exit 2 from every command (one error model)
    assert missing.exit_code == 2 and "does not exist" in _unwrapped(missing.output)
    foreign = runner.invoke(app, ["export", str(tmp_path), "--script", str(tmp_path / "x.py")])
    assert foreign.exit_code == 2 and "no run.jsonl" in _unwrapped(foreign.output)


def _unwrapped(text: str) -> str:
    """The console wraps long lines (paths) at its width; compare words, not line breaks."""
    return " ".join(text.split())


@pytest.mark.slow
def test_showcase_rerun_reproduces_its_outputs(tmp_path: Path) -> None:
    """The showcase, run by the offline analyst, then replayed without a model: same artifacts."""
    from coderoom.jobs import load_job
    from coderoom.run import run_job
    from coderoom.sandboxes import SandboxSpec

    example = Path(__file__).resolve().parents[2] / "examples" / "building_energy"
    job = load_job(example).model_copy(update={"model": "offline", "sandbox": SandboxSpec(backend="local")})
    run_dir = tmp_path / "run"
    assert asyncio.run(run_job(job, run_dir=run_dir)).ok
    replay = asyncio.run(rerun(run_dir, tmp_path / "rerun", backend="local", timeout=300))
    assert replay.ok, (replay.out_dir / "replay.log").read_text()
    for spec in job.outputs:
        original, again = run_dir / spec.path, tmp_path / "rerun" / spec.path
        if spec.path.endswith(".png"):
            assert Image.open(again).size == Image.open(original).size
        else:
            assert again.read_bytes() == original.read_bytes(), spec.path


def test_forged_record_text_is_inert_in_the_notebook_and_the_script(kernel_run: Path, tmp_path: Path) -> None:
    """Attack B10-B12: model text with raw HTML, a remote image, a javascript: link and a NUL;
    a shell step whose folder holds `$(...)` and whose shell is not a plain word."""
    forged = tmp_path / "forged"
    shutil.copytree(kernel_run, forged)
    lines = (forged / "run.jsonl").read_text().splitlines()
    message = {"type": "model_call", "turn": 99, "output": [{"kind": "message", "text":
               "<img src=x onerror=alert(1)> ![beacon](http://127.0.0.1:9/?k=canary) [x](javascript:alert(1)) nul\x00"}]}
    shell_step = {"type": "tool_result", "call_id": "f9", "name": "exec_command", "output": "",
                  "arguments": {"cmd": "echo hi", "workdir": "out$(touch PWNED)", "shell": "bash\nrm -rf ~"}}
    lines[-1:-1] = [json.dumps(message), json.dumps(shell_step)]
    (forged / "run.jsonl").write_text("\n".join(lines) + "\n")
    source = export_script(forged, tmp_path / "replay.py").read_text()  # compiles: no NUL left raw
    assert "\x00" not in source and "nul\\x00" in source
    notebook = nbformat.read(export_notebook(forged, tmp_path / "nb.ipynb"), as_version=4)
    text = "\n".join(cell.source for cell in notebook.cells)
    assert "<img" not in text and "![beacon]" not in text and "javascript:" not in text
    assert "cd 'out$(touch PWNED)' || exit" in text  # quoted for the shell: no command substitution
    assert "%%script bash\nrm" not in text and "%%bash\ncd 'out" in text


@pytest.mark.parametrize(
    "flag",
    ["{new}=input/building_energy.csv", "{new}"],
    ids=["not-one-of-the-runs-inputs", "no-workspace-path"],
)
def test_rerun_input_that_replaces_none_of_the_runs_inputs_exits_2_listing_them(
    kernel_run_on_fake: Path, tmp_path: Path, flag: str
) -> None:
    """A new file at a path the replay never reads would leave the old data analysed, and the
    rerun would pass: it is a usage error that lists the inputs, and no rerun folder is made."""
    new = write_energy_csv(tmp_path / "new.csv", spikes=[5])
    out = tmp_path / "rerun"
    result = CliRunner().invoke(
        app, ["rerun", str(kernel_run_on_fake), "--input", flag.format(new=new), "--out", str(out)]
    )
    assert result.exit_code == 2, result.output
    text = _unwrapped(result.output)
    assert "replace one with --input NEW_FILE=input/energy.csv" in text
    assert not out.exists()


def test_rerun_from_python_refuses_an_input_the_run_never_had(kernel_run_on_fake: Path, tmp_path: Path) -> None:
    new = write_energy_csv(tmp_path / "new.csv", spikes=[5])
    with pytest.raises(UsageError, match="'input/other.csv' is not one of the run's inputs"):
        asyncio.run(rerun(kernel_run_on_fake, tmp_path / "rerun", inputs={"input/other.csv": new}))
    assert not (tmp_path / "rerun").exists()


def test_a_failed_rerun_shows_the_replays_own_error(kernel_run: Path, tmp_path: Path) -> None:
    """Not only "FAIL missing": the cause, from replay.log, on one line."""
    renamed = tmp_path / "renamed.csv"
    renamed.write_text(write_energy_csv(tmp_path / "new.csv", spikes=[5]).read_text().replace("energy_kwh", "kwh", 1))
    result = CliRunner().invoke(
        app,
        ["rerun", str(kernel_run), "--input", f"{renamed}=input/energy.csv", "--out", str(tmp_path / "rerun"),
         "--sandbox", "local"],
    )
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("replay error: ")]
    # the recorded run's own KeyError: 'missing_column' (the agent saw it and went on) is not it
    assert line.startswith("replay error: KeyError: 'energy_kwh'"), line
