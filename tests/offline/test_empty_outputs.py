"""An empty result can be the right answer: a clean series has no abnormal events. A job says so
with `allow_empty = true` (coderoom.toml) or `--output PATH:allow-empty` (flags, run_job); the
showcase allows it for anomalies.csv, so the offline analyst passes on a clean series, and a job
that does not allow it still fails on the same data."""

from __future__ import annotations

import asyncio
import csv
import math
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from coderoom.jobs import JobError, build_job, load_job, with_output_flags
from coderoom.run import run_job
from coderoom.sandboxes import SandboxSpec

BACKEND = os.environ.get("CODEROOM_TEST_BACKEND", "local")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "building_energy"
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def clean_series(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight weeks of hourly use with a daily and weekly rhythm, a little smooth wobble, and no
    events at all."""
    path = tmp_path_factory.mktemp("clean") / "clean.csv"
    start = datetime(2024, 1, 1)
    with path.open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["timestamp", "energy_kwh", "outdoor_temp_c"])
        for hour in range(24 * 7 * 8):
            at = start + timedelta(hours=hour)
            working = at.weekday() < 5 and 8 <= at.hour < 18
            energy = 40 + (25 if working else 0) + 3 * math.sin(hour / 5)
            out.writerow([f"{at:%Y-%m-%d %H:%M}", f"{energy:.2f}", f"{4 + 3 * math.sin(2 * math.pi * at.hour / 24):.1f}"])
    return path


def test_the_string_form_of_an_output_can_allow_empty() -> None:
    job = build_job({"prompt": "p", "outputs": ["output/a.csv:allow-empty", "output/b.csv"]})
    assert [(o.path, o.allow_empty) for o in job.outputs] == [("output/a.csv", True), ("output/b.csv", False)]


def test_a_flag_relaxes_an_output_the_job_file_lists() -> None:
    job = load_job(EXAMPLE)
    strict = [{"path": "output/anomalies.csv", "allow_empty": False}]
    assert with_output_flags(strict, ["output/anomalies.csv:allow-empty"]) == [
        {"path": "output/anomalies.csv", "allow_empty": True}]
    with pytest.raises(JobError, match="listed twice"):  # a plain duplicate is still a mistake
        build_job({**job.model_dump(), "outputs": with_output_flags(strict, ["output/anomalies.csv"])})


def test_the_showcase_allows_no_anomalies() -> None:
    [anomalies] = [o for o in load_job(EXAMPLE).outputs if o.path == "output/anomalies.csv"]
    assert anomalies.allow_empty
    assert not any(o.allow_empty for o in load_job(EXAMPLE).outputs if o.path != "output/anomalies.csv")


def test_the_offline_analyst_passes_the_showcase_on_a_clean_series(clean_series: Path, tmp_path: Path) -> None:
    job = load_job(EXAMPLE)
    job = job.model_copy(update={"model": "offline", "sandbox": SandboxSpec(backend=BACKEND),
                                 "inputs": {"input/building_energy.csv": clean_series}})
    result = asyncio.run(run_job(job, run_dir=tmp_path / "allowed"))
    assert result.ok, (result.error, [(c.path, c.detail) for c in result.checks])
    rows = list(csv.reader((tmp_path / "allowed/output/anomalies.csv").open()))
    assert len(rows) == 1 and rows[0]  # a header, no events
    assert "found 0 abnormal event" in result.final_output

    strict = job.model_copy(update={"outputs": [o.model_copy(update={"allow_empty": False}) for o in job.outputs]})
    refused = asyncio.run(run_job(strict, run_dir=tmp_path / "strict"))
    assert not refused.ok
    assert any("no data rows" in c.detail for c in refused.checks if c.path == "output/anomalies.csv")


def test_the_flag_form_passes_on_a_clean_series(clean_series: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}
    done = subprocess.run(
        [sys.executable, "-m", "coderoom", "run", "--model", "offline", "--sandbox", BACKEND, "--out", str(tmp_path / "run"),
         "--input", f"{clean_series}=input/energy.csv", "--output", "output/anomalies.csv:allow-empty",
         "Find abnormal energy use in input/energy.csv and save output/anomalies.csv"],
        capture_output=True, text=True, timeout=300, env={**env, "PYTHONPATH": str(SRC)}, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "0 rows" in done.stdout
