"""`coderoom batch`: many jobs, each in its own sandbox and run folder, at most --parallel at once;
batch.jsonl says when each started and how it ended; --resume runs again only what did not pass;
a bad job or row is exit 2 before anything runs; a signal stops the running jobs as `run` does.

The runs are real: local sandboxes and the offline analyst (no model server). A job fails when
its CSV is too short for the analyst, which then declines (a failed run, exit 1).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from backends import require_backend
from coderoom.batch.ledger import LEDGER_FILE
from coderoom.record import read_record

COMMAND = [sys.executable, "-m", "coderoom"]
PROMPT = "Find abnormal energy use in input/e.csv and save output/anomalies.csv"
JOB_TOML = f'prompt = "{PROMPT}"\nmodel = "offline"\n[inputs]\n"input/e.csv" = "e.csv"\n[[outputs]]\npath = "output/anomalies.csv"\n'
TOO_SHORT = "timestamp,energy_kwh\n2024-01-01 00:00,1.0\n"  # the analyst declines it


@pytest.fixture(autouse=True)
def _local_sandbox() -> None:
    require_backend("local")


def hourly_csv(hours: int = 240) -> str:
    """A day-shaped hourly series with one spike: what the offline analyst analyses."""
    rows = ["timestamp,energy_kwh"]
    for hour in range(hours):
        value = 50 + 10 * math.sin(hour / 24 * 2 * math.pi) + (200 if hour == 100 else 0)
        rows.append(f"2024-01-{1 + hour // 24:02d} {hour % 24:02d}:00,{value:.2f}")
    return "\n".join(rows) + "\n"


def job_folder(root: Path, name: str, csv_text: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "coderoom.toml").write_text(JOB_TOML)
    (folder / "e.csv").write_text(csv_text)
    return folder


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}


def coderoom(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *map(str, args)], capture_output=True, text=True, env=env(), timeout=300)


def ledger(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / LEDGER_FILE).read_text().splitlines()]


def ends(lines: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {line["job"]: line for line in lines if line["event"] == "end"}


@pytest.fixture(scope="module")
def first_batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """Three job folders, two good and one whose CSV the analyst declines, two at a time."""
    root = tmp_path_factory.mktemp("batch")
    jobs = [job_folder(root, "good1", hourly_csv()), job_folder(root, "good2", hourly_csv()),
            job_folder(root, "bad", TOO_SHORT)]  # fmt: skip
    done = coderoom("batch", *jobs, "--out", root / "out", "--parallel", "2")
    return root, root / "out", done


def test_a_failed_job_makes_the_batch_exit_1_and_is_listed(first_batch) -> None:
    _, _, done = first_batch
    assert done.returncode == 1, done.stderr
    stderr = " ".join(done.stderr.split())
    assert "failed: bad: the model could not serve this request" in stderr
    assert "good1" not in stderr.split("failed:")[-1]  # only the failure is listed
    for name in ("good1", "good2", "bad"):
        assert name in done.stdout  # the summary table


def test_batch_jsonl_has_one_start_and_one_end_per_job_with_what_the_run_recorded(first_batch) -> None:
    _, out, _ = first_batch
    lines = ledger(out)
    assert sorted((line["job"], line["event"]) for line in lines) == sorted(
        (job, event) for job in ("good1", "good2", "bad") for event in ("start", "end")
    )
    ended = ends(lines)
    assert {job: line["status"] for job, line in ended.items()} == {"good1": "ok", "good2": "ok", "bad": "failed"}
    for job, line in ended.items():
        run_end = read_record(out / line["run_dir"]).events[-1]
        assert (run_end.type, run_end.status, run_end.usage.total_tokens) == ("run_end", line["status"], line["tokens"])
        assert (line["outputs_ok"], line["outputs"]) == ((1, 1) if job != "bad" else (0, 1))
        assert line["tokens"] > 0 and line["duration_s"] > 0


def test_each_job_has_a_run_folder_of_its_own(first_batch) -> None:
    _, out, _ = first_batch
    ended = ends(ledger(out))
    folders = {job: out / line["run_dir"] for job, line in ended.items()}
    assert len(set(folders.values())) == 3
    assert sorted(p.name for p in out.iterdir()) == sorted([LEDGER_FILE, *(f.name for f in folders.values())])
    for job, folder in folders.items():
        assert read_record(folder).events[0].job["name"] == job
        assert (folder / "output/anomalies.csv").is_file() == (job != "bad")


def test_parallel_2_runs_two_jobs_at_once_and_never_three(first_batch) -> None:
    _, out, _ = first_batch
    moments = sorted((line["t"], 1 if line["event"] == "start" else -1) for line in ledger(out))
    running, most = 0, 0
    for _, change in moments:
        running += change
        most = max(most, running)
    assert most == 2


def test_resume_runs_again_only_what_did_not_pass(first_batch, tmp_path: Path) -> None:
    root, out, _ = first_batch
    resumed = tmp_path / "out"
    shutil.copytree(out, resumed)
    before = ledger(resumed)
    (root / "bad" / "e.csv").write_text(hourly_csv())  # what made it fail is fixed
    done = coderoom("batch", root / "good1", root / "good2", root / "bad", "--out", resumed, "--resume")
    assert done.returncode == 0, done.stderr
    lines = ledger(resumed)
    assert lines[: len(before)] == before
    added = lines[len(before):]
    assert [(line["job"], line["event"]) for line in added] == [("bad", "start"), ("bad", "end")]
    assert added[1]["status"] == "ok" and added[1]["run_dir"] != ends(before)["bad"]["run_dir"]
    assert (resumed / ends(before)["bad"]["run_dir"]).is_dir()  # the failed attempt is kept
    assert done.stdout.count("(earlier run)") == 2


def test_a_bad_manifest_row_exits_2_naming_row_and_field_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text(hourly_csv())
    (tmp_path / "shared.toml").write_text('model = "offline"\n')
    manifest = tmp_path / "jobs.csv"
    manifest.write_text(
        "name,prompt,inputs,outputs\n"
        f"a,{PROMPT},e.csv=input/e.csv,output/anomalies.csv\n"
        f"b,{PROMPT},e.csv=input/e.csv,report.md\n"
    )
    done = coderoom("batch", manifest, "--job-file", tmp_path / "shared.toml", "--out", tmp_path / "out")
    assert done.returncode == 2, done.stderr
    stderr = " ".join(done.stderr.split())
    assert f"{manifest} row 2: invalid job" in stderr and "outputs.0.path: 'report.md' must be a file under output/" in stderr
    assert not (tmp_path / "out").exists()


def test_sigint_mid_batch_interrupts_the_running_jobs_and_batch_jsonl_says_so(tmp_path: Path) -> None:
    (tmp_path / "e.csv").write_text(hourly_csv(24 * 60))
    (tmp_path / "shared.toml").write_text(JOB_TOML)
    manifest = tmp_path / "jobs.jsonl"
    manifest.write_text("".join(json.dumps({"name": name}) + "\n" for name in ("a", "b", "c")))
    out = tmp_path / "out"
    process = subprocess.Popen(
        [*COMMAND, "batch", str(manifest), "--job-file", str(tmp_path / "shared.toml"), "--out", str(out), "--parallel", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not _both_running(out):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "interrupted by SIGINT" in stderr
    lines = ledger(out)
    ended = ends(lines)
    assert sorted(line["job"] for line in lines if line["event"] == "start") == ["a", "b"] == sorted(ended)
    for line in ended.values():
        assert (line["status"], line["signal"]) == ("interrupted", "SIGINT")
        run_end = read_record(out / line["run_dir"]).events[-1]
        assert (run_end.type, run_end.status, run_end.signal) == ("run_end", "interrupted", "SIGINT")


def _both_running(out: Path) -> bool:
    """Two jobs started, and each run's agent is at work (a tool call in its record)."""
    try:
        started = [line for line in ledger(out) if line["event"] == "start"]
        return len(started) == 2 and all(any(e.type == "tool_start" for e in read_record(out / s["run_dir"]).events) for s in started)
    except (OSError, ValueError):
        return False
