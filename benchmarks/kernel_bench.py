#!/usr/bin/env python3
"""What a warm `run_python` cell costs, beside a fresh-process step.

The warm cell computes on a DataFrame the kernel already holds (hourly means of the showcase
file); the fresh step is what an `exec_command` analysis step pays every time: a new Python,
`import pandas`, read the CSV, compute. Both run through the session API of each backend, timed
on the host from call to result.

    python benchmarks/kernel_bench.py [--backend unix_local --backend docker ...] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

from agents.sandbox import Manifest
from docs_table import DOCS, machine, write_section

from coderoom.sandboxes import SandboxSpec, backend_names, get_backend
from coderoom.sandboxes.session import open_session
from coderoom.tools.python_kernel import RunPythonTool, keeps_processes
from coderoom.workspace import stage_inputs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "building_energy" / "data" / "building_energy.csv"
LOAD = (
    "import pandas as pd\n"
    "df = pd.read_csv('input/building_energy.csv', parse_dates=['timestamp'], index_col='timestamp')\n"
    "df.shape"
)
CELL = "df.groupby(df.index.hour).mean()"
FRESH = (
    "import pandas as pd; "
    "df = pd.read_csv('input/building_energy.csv', parse_dates=['timestamp'], index_col='timestamp'); "
    "print(df.groupby(df.index.hour).mean())"
)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


async def measure(backend: str, warm_runs: int, fresh_runs: int) -> list[str] | str:
    """Table rows for one backend, or the reason it was not measured."""
    unconfined = backend == "unix_local"  # the SDK's backend, measured for comparison
    reason = get_backend(backend, unconfined_no_isolation=unconfined).unavailable_reason(SandboxSpec(backend=backend))
    if reason is not None:
        return f"unavailable: {reason}"
    async with open_session(SandboxSpec(backend=backend), Manifest(), unconfined_no_isolation=unconfined) as session:
        await stage_inputs(session, {"input/building_energy.csv": DATA})
        rows = []
        if keeps_processes(session):
            tool = RunPythonTool(session, images=False, timeout=60)
            started = time.perf_counter()
            first = await tool.run(LOAD)
            start_s = time.perf_counter() - started
            assert "[cell 1: ok" in first, first
            await tool.run(CELL)  # the first groupby pays for its own lazy imports
            warm = []
            for _ in range(warm_runs):
                started = time.perf_counter()
                out = await tool.run(CELL)
                warm.append(time.perf_counter() - started)
                assert "DataFrame: 24 rows" in out, out
            p50, p95 = percentiles(warm)
            rows.append(f"| {backend} | run_python, warm cell | {len(warm)} | {p50:.1f} | {p95:.1f} |")
            rows.append(f"| {backend} | run_python, first cell (kernel start + import + load) | 1 | "
                        f"{start_s * 1000:.0f} | - |")  # fmt: skip
        else:
            rows.append(f"| {backend} | run_python | - | not offered: commands cannot outlive themselves | - |")
        fresh = []
        for _ in range(fresh_runs):
            started = time.perf_counter()
            done = await session.exec("python3", "-c", FRESH, shell=False, timeout=120)
            fresh.append(time.perf_counter() - started)
            if done.exit_code != 0:
                error = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
                rows.append(f"| {backend} | fresh process | - | failed: {' '.join(error)[:80]} | - |")
                return rows
        p50, p95 = percentiles(fresh)
        rows.append(f"| {backend} | fresh process: python -c 'import pandas; read csv; groupby' | "
                    f"{len(fresh)} | {p50:.1f} | {p95:.1f} |")  # fmt: skip
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", action="append", help="default: every offered backend, and unix_local")
    parser.add_argument("--warm-runs", type=int, default=100)
    parser.add_argument("--fresh-runs", type=int, default=20)
    parser.add_argument("--write-docs", action="store_true", help=f"update the section in {DOCS}")
    args = parser.parse_args()
    backends = args.backend or ["unix_local", *backend_names()]
    table = ["| backend | step | runs | p50 ms | p95 ms |", "|---|---|---|---|---|"]
    notes = []
    for backend in backends:
        result = asyncio.run(measure(backend, args.warm_runs, args.fresh_runs))
        if isinstance(result, str):
            notes.append(f"- {backend}: {result}")
        else:
            table += result
    text = "\n".join(table + ([""] + notes if notes else []))
    print(text)
    if args.write_docs:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        section = (
            f"\n## run_python: warm kernel cell vs fresh process ({stamp})\n\n"
            f"Machine: {machine()}, load average {load} when it ended. Data: the showcase CSV ({DATA.stat().st_size} bytes, hourly). "
            f"Warm cell: `{CELL}` on a frame the kernel already holds; fresh process: `python3 -c` "
            "that imports pandas, reads the CSV and computes the same thing. Host-side wall time from "
            "call to result, through the session API. Target: a warm cell on local, p50 <= 10. "
            "Made by `python benchmarks/kernel_bench.py "
            "--write-docs`.\n\n" + text + "\n"
        )
        write_section("## run_python: warm kernel cell", section)
        print(f"\nupdated {DOCS}")


if __name__ == "__main__":
    main()
