#!/usr/bin/env python3
"""Live sessions under load (issue 20), through the Session API as a service runs them: how many
sessions a burst of opens starts per second, what a cell costs with 1, 4, 8 and 16 sessions
running cells at once, and the memory of one live session.

A `SessionManager` (the web page's and the MCP server's, with its cap of MAX_CONCURRENT_OPENS
opens at once; no warm pool, whose size would bound the burst instead) opens the largest level's
count of sessions at once, each given the showcase CSV. Opens per second: that count over the
time from asking to the last open returning; ready per second: to the last session whose kernel
answered `1+1` (a session's kernel starts and imports in the background after its open). Each
session then loads the CSV into a frame. Per level L, the first L sessions run their cells at
once, trivial ones (`1+1`) first, then small pandas ones (an hourly groupby on the frame the
kernel holds); each cell is timed from the call to its result, about `--samples` cells per level
and kind. Memory: the proportional set size (PSS, /proc/PID/smaps_rollup) of each session's
sandbox process tree (bwrap and everything under it: the launcher, the kernel's supervisor and
worker) with the frame loaded, with every session live; the host process that drives them (the
manager, the records) is shared and not counted. PSS splits each shared page among the processes
mapping it, so the more sessions are live, the less each one's share of the libraries weighs.

    PYTHONPATH=src python benchmarks/load_bench.py [--levels 1,4,8,16] [--samples 80] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from docs_table import machine, write_section
from proc_stats import ms, pss_kib, trees
from session_bench import DATA, FILES

from coderoom import Session, SessionManager
from coderoom.service.manager import MAX_CONCURRENT_OPENS

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reliability.md"
LOAD = (
    "import pandas as pd\n"
    "df = pd.read_csv('input/building_energy.csv', parse_dates=['timestamp'], index_col='timestamp')\n"
    "df.shape"
)
TRIVIAL = "1+1"
PANDAS = "df.groupby(df.index.hour).mean()"


async def cell(session: Session, code: str, expect: str) -> float:
    """One cell's time from the call to its result, in seconds; it must pass."""
    started = time.perf_counter()
    result = await session.run_python(code)
    took = time.perf_counter() - started
    assert result.status == "ok" and expect in result.text, result.text
    return took


async def cells(sessions: list[Session], code: str, expect: str, each: int) -> list[float]:
    """`each` cells in every session of `sessions`, the sessions at once, one after another in each."""

    async def run(session: Session) -> list[float]:
        return [await cell(session, code, expect) for _ in range(each)]

    return [took for samples in await asyncio.gather(*(run(s) for s in sessions)) for took in samples]


async def measure(levels: list[int], samples: int) -> str:
    load_before = os.getloadavg()
    runs = Path(tempfile.mkdtemp(prefix="coderoom-load-bench-")) / "runs"
    count = max(levels)
    before = set(trees(os.getpid()))
    async with SessionManager(max_sessions=count, model="offline", runs_dir=runs) as manager:
        started = time.perf_counter()

        async def open_ready() -> tuple[Session, float, float]:
            session = await manager.open(files=FILES)
            opened = time.perf_counter()
            await cell(session, TRIVIAL, "2")
            return session, opened, time.perf_counter()

        opened = await asyncio.gather(*(open_ready() for _ in range(count)))
        sessions = [session for session, _, _ in opened]
        open_s = max(at for _, at, _ in opened) - started
        ready_s = max(at for _, _, at in opened) - started
        await asyncio.gather(*(cell(session, LOAD, "(") for session in sessions))
        await cells(sessions, PANDAS, "DataFrame: 24 rows", 1)  # each groupby pays its lazy imports once
        sandboxes = [pids for child, pids in trees(os.getpid()).items() if child not in before]
        per_sandbox = sorted(pss_kib(pids) / 1024 for pids in sandboxes)
        rows = [
            "| sessions at once | cell | cells | p50 ms | p99 ms |",
            "|---|---|---|---|---|",
        ]
        for level in levels:
            each = max(1, -(-samples // level))
            await asyncio.sleep(0.5)
            trivial = await cells(sessions[:level], TRIVIAL, "2", each)
            await asyncio.sleep(0.5)
            frame = await cells(sessions[:level], PANDAS, "DataFrame: 24 rows", each)
            rows.append(f"| {level} | `{TRIVIAL}` | {len(trivial)} | {ms(trivial, (0.5, 0.99))} |")
            rows.append(f"| {level} | `{PANDAS}` | {len(frame)} | {ms(frame, (0.5, 0.99))} |")
    load_after = os.getloadavg()
    loaded = " (a loaded machine: shared with other work; re-run quiet before reading these as capacity)"
    rows += [
        "",
        "| sessions | figure |",
        "|---|---|",
        f"| {count} opened at once (`SessionManager`, {MAX_CONCURRENT_OPENS} opens at a time, no pool) | "
        f"{count / open_s:.1f} sessions opened per second ({open_s:.1f} s for all); "
        f"{count / ready_s:.1f} per second ready (first `{TRIVIAL}` answered; {ready_s:.1f} s for all) |",
        f"| {len(per_sandbox)} live, frame loaded | PSS per session's sandbox tree: mean "
        f"{statistics.mean(per_sandbox):.0f} MiB, min {per_sandbox[0]:.0f}, max {per_sandbox[-1]:.0f} "
        f"({1024 / statistics.mean(per_sandbox):.1f} sessions per GiB) |",
        "",
        f"Load average (1, 5, 15 min) {' '.join(f'{x:.2f}' for x in load_before)} at the start, "
        f"{' '.join(f'{x:.2f}' for x in load_after)} at the end, on {os.cpu_count()} cores{loaded}.",
    ]
    if len(per_sandbox) != count:
        rows.append(f"Found {len(per_sandbox)} sandbox trees for {count} sessions: PSS per session is per tree found.")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,4,8,16", help="sessions running cells at once, comma-separated")
    parser.add_argument("--samples", type=int, default=80, help="cells per level and kind (split over the sessions)")
    parser.add_argument("--write-docs", action="store_true", help=f"update the section in {DOCS}")
    args = parser.parse_args()
    levels = sorted({int(level) for level in args.levels.split(",")})
    text = asyncio.run(measure(levels, args.samples))
    print(text)
    if args.write_docs:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        section = (
            f"## Live sessions under load (issue 20, {stamp})\n\n"
            f"Machine: {machine()}. Local backend, through the Session API (`SessionManager`, "
            f"offline model, no warm pool). Each session holds the showcase CSV ({DATA.stat().st_size} "
            f"bytes) as a frame; the pandas cell is `{PANDAS}` on it. A cell is timed from the "
            "`run_python` call to its result, on the host; the sessions run theirs at once, one "
            "after another within each. PSS: each session's sandbox process tree (bwrap, the "
            "launcher, the kernel), read from /proc/PID/smaps_rollup with every session live; PSS "
            "divides a shared page (the interpreter's and pandas' libraries, mapped from the same "
            "files) among the processes mapping it, so the figure per session falls as more "
            "sessions are live (session_bench.py weighs fewer). Made "
            "by `python benchmarks/load_bench.py --write-docs`.\n\n" + text + "\n"
        )
        write_section("## Live sessions under load", section, docs=DOCS)
        print(f"\nupdated {DOCS}")


if __name__ == "__main__":
    main()
