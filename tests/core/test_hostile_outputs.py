"""Required outputs built to exhaust a parser cost the coderoom process nothing: a PNG bomb (a
few KB declaring 30000x30000 pixels) and a 160 MiB CSV, both made in a real sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostile_outputs_run import CSV_BYTES, expected_rows

MAX_GROWTH_KIB = 64 * 1024  # the CSV alone is 160 MiB; parsing a 300 MiB one whole in-process took 6 GB


@pytest.mark.slow
def test_a_png_bomb_and_a_huge_csv_are_checked_without_growing_the_host(tmp_path: Path) -> None:
    probe = Path(__file__).with_name("hostile_outputs_run.py")
    done = subprocess.run(
        [sys.executable, str(probe), str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600, env=os.environ, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    bomb, big = report["checks"]
    assert report["status"] == "failed" and not bomb["ok"]
    assert "30000x30000 (900 megapixels): over the 64 megapixel limit" in bomb["detail"]
    assert big == {
        "path": "output/big.csv", "ok": True, "detail": f"csv: {expected_rows()} rows, 3 columns",
        "size": report["csv_size"],
    }  # fmt: skip
    assert report["csv_size"] >= CSV_BYTES
    growth = report["peak_rss_kib_after"] - report["peak_rss_kib_before"]
    assert growth < MAX_GROWTH_KIB, report
