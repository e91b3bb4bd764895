#!/usr/bin/env python3
"""Live sessions, side by side in one run: the first cell of a new session from the warm pool,
without it, and in a fresh Jupyter kernel; a warm cell in each, alone and with 8 sessions (and 8
kernels) running cells at once; and memory per session.

A session without the pool starts its kernel and imports in the background at once; so its first
cell is also timed alone when asked `--think` seconds after the open, as a model's first call
comes. Beside them, the floor no session can beat on this runtime: an interpreter's start in a
started sandbox, and the first cell's code as one fresh process there. A last table puts issue
25's targets beside their anchors (Jupyter), with the load average.

Every trial measures the three one after another, with the pool refilled (and idle) before the
next measurement, so they share the machine's load. The cell is the same everywhere: import
pandas, read the showcase CSV, an hourly groupby. "First cell" is timed from asking for a new
session (or kernel) to the cell's result. Jupyter (jupyter_client + ipykernel) runs on the host
with no sandbox at all: it is the floor a sandbox is compared with, not an alternative.
Memory: the proportional set size (PSS, /proc/PID/smaps_rollup) of every process a session
added (its sandbox and kernel, with the frame loaded), and of an ipykernel holding the same.
Concurrent: `--concurrent` sessions (without the pool) each hold the frame, then all run
`--concurrent-runs` warm cells at once; the same with as many Jupyter kernels, one thread each.

    PYTHONPATH=src python benchmarks/session_bench.py [--trials 5] [--warm-runs 30] [--sessions 4]
        [--concurrent 8] [--concurrent-runs 20] [--think 3] [--write-docs]
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

from docs_table import DOCS, machine, write_section
from proc_stats import descendants, ms, pss_kib
from targets import Target
from targets import table as table_of_targets

from coderoom import Session, WarmPool
from coderoom.sandboxes import SandboxSpec

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "building_energy" / "data" / "building_energy.csv"
FIRST = (
    "import pandas as pd\n"
    "df = pd.read_csv('input/building_energy.csv', parse_dates=['timestamp'], index_col='timestamp')\n"
    "df.groupby(df.index.hour).mean()"
)
CELL = "df.groupby(df.index.hour).mean()"
FIRST_CELL_TARGET_S = 0.5  # issue 25: a session's first cell without the pool
FILES = {"input/building_energy.csv": DATA.read_bytes()}


class Jupyter:
    """A fresh ipykernel per first cell, as a notebook server would start one."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        (workdir / "input").mkdir(parents=True, exist_ok=True)
        (workdir / "input/building_energy.csv").write_bytes(FILES["input/building_energy.csv"])

    def start(self):  # type: ignore[no-untyped-def]
        from jupyter_client.manager import start_new_kernel

        return start_new_kernel(kernel_name="python3", cwd=str(self.workdir))

    @staticmethod
    def run(client, code: str) -> None:  # type: ignore[no-untyped-def]
        reply = client.execute_interactive(code, timeout=120, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok", reply["content"]


async def first_cell(pool: WarmPool | None, runs: Path, cells: list[float] | None = None) -> tuple[float, Session]:
    """Open + first cell, in seconds (the cell alone appended to `cells`), and the session."""
    started = time.perf_counter()
    session = await Session.open(model="offline", files=FILES, runs_dir=runs, pool=pool)
    opened = time.perf_counter()
    result = await session.run_python(FIRST)
    done = time.perf_counter()
    assert result.status == "ok" and "DataFrame: 24 rows" in result.text, result.text
    if cells is not None:
        cells.append(done - opened)
    return done - started, session


async def cell_after_thinking(runs: Path, think_s: float) -> float:
    """The first cell alone, asked `think_s` after a session without the pool opened (as a model
    thinks before its first call): what is left of the kernel's start and imports then."""
    session = await Session.open(model="offline", files=FILES, runs_dir=runs)
    try:
        await asyncio.sleep(think_s)
        started = time.perf_counter()
        result = await session.run_python(FIRST)
        took = time.perf_counter() - started
        assert result.status == "ok" and "DataFrame: 24 rows" in result.text, result.text
    finally:
        await session.close()
    return took


async def floor(n: int) -> tuple[list[float], list[float]]:
    """What no session can beat on this runtime, in a started local sandbox: `python3 -c pass`
    (an interpreter's start with its site-packages, .pth files included), and the first cell's
    code as one fresh `python3` (that start, the imports, read_csv and the groupby), `n` each, in
    seconds: a session without the pool starts its kernel and does the same imports. The fresh
    process ends with `os._exit`: a kernel never pays an interpreter's teardown with pandas
    loaded (about 90 ms here, measured paired), so neither does the floor."""
    from agents.sandbox import Manifest
    from agents.sandbox.entries import File

    from coderoom.sandboxes.session import open_session

    manifest = Manifest(entries={name: File(content=data) for name, data in FILES.items()})
    starts, cells = [], []
    async with open_session(SandboxSpec(backend="local"), manifest) as sandbox:
        for argv, samples in ((["python3", "-c", "pass"], starts), (["python3", "-c", FIRST + "\nimport os; os._exit(0)"], cells)):
            for _ in range(n):
                began = time.perf_counter()
                result = await sandbox.exec(*argv, shell=False)
                samples.append(time.perf_counter() - began)
                assert result.exit_code == 0, result.stderr
    return starts, cells


async def warm_cells(session: Session, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        result = await session.run_python(CELL)
        samples.append(time.perf_counter() - started)
        assert result.status == "ok", result.text
    return samples


async def concurrent_sessions(runs: Path, count: int, cells_each: int) -> list[float]:
    """Warm cells of `count` sessions running at once (each already holds the frame)."""
    live = [(await first_cell(None, runs))[1] for _ in range(count)]
    try:
        await asyncio.sleep(0.5)
        per_session = await asyncio.gather(*(warm_cells(session, cells_each) for session in live))
    finally:
        for session in live:
            await session.close()
    return [sample for samples in per_session for sample in samples]


async def concurrent_jupyter(jupyter: Jupyter, count: int, cells_each: int) -> list[float]:
    """The same with `count` Jupyter kernels, each driven from a thread of its own."""
    kernels = [jupyter.start() for _ in range(count)]

    def cells(client) -> list[float]:  # type: ignore[no-untyped-def]
        samples = []
        for _ in range(cells_each):
            started = time.perf_counter()
            Jupyter.run(client, CELL)
            samples.append(time.perf_counter() - started)
        return samples

    try:
        for _, client in kernels:
            Jupyter.run(client, FIRST)
        per_kernel = await asyncio.gather(*(asyncio.to_thread(cells, client) for _, client in kernels))
    finally:
        for manager, client in kernels:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    return [sample for samples in per_kernel for sample in samples]


async def measure(trials: int, warm_runs: int, sessions: int, concurrent: int, concurrent_runs: int,
                  think_s: float = 3.0) -> tuple[str, list[Target]]:
    """The tables, and issue 25's targets among them."""
    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="coderoom-session-bench-"))
    runs = work / "runs"
    jupyter = Jupyter(work / "jupyter")
    pool = WarmPool(size=1, max_idle_s=3600, spec=SandboxSpec(backend="local"))
    await pool.start()
    pooled, cold, fresh = [], [], []
    pooled_cell: list[float] = []
    cold_cell: list[float] = []
    thought: list[float] = []  # the first cell alone, asked `think_s` after the open
    warm_pooled, warm_cold, warm_jupyter = [], [], []
    python_start: list[float] = []  # `floor`: an interpreter's start in the sandbox
    one_process: list[float] = []  # `floor`: the first cell's code as one fresh python3 there
    try:
        for _ in range(trials):
            await pool.wait_ready(300)
            await asyncio.sleep(0.5)  # the refill's processes settle
            took, session = await first_cell(pool, runs, pooled_cell)
            pooled.append(took)
            await pool.wait_ready(300)  # the replacement's start would compete with the warm cells
            await asyncio.sleep(0.5)
            warm_pooled += await warm_cells(session, warm_runs)
            await session.close()
            await pool.wait_ready(300)
            await asyncio.sleep(0.5)
            took, session = await first_cell(None, runs, cold_cell)
            cold.append(took)
            warm_cold += await warm_cells(session, warm_runs)
            await session.close()
            await pool.wait_ready(300)
            thought.append(await cell_after_thinking(runs, think_s))
            await pool.wait_ready(300)
            await asyncio.sleep(0.5)
            started = time.perf_counter()
            manager, client = jupyter.start()
            Jupyter.run(client, FIRST)
            fresh.append(time.perf_counter() - started)
            for _ in range(warm_runs):
                started = time.perf_counter()
                Jupyter.run(client, CELL)
                warm_jupyter.append(time.perf_counter() - started)
            client.stop_channels()
            manager.shutdown_kernel(now=True)
            await asyncio.sleep(0.5)
            starts, cells = await floor(3)
            python_start += starts
            one_process += cells
        await pool.close()
        pool = None  # type: ignore[assignment]
        together = await concurrent_sessions(runs, concurrent, concurrent_runs)
        together_jupyter = await concurrent_jupyter(jupyter, concurrent, concurrent_runs)
        before = descendants(os.getpid())
        live = []
        for _ in range(sessions):
            _, session = await first_cell(None, runs)
            live.append(session)
        per_session = pss_kib(descendants(os.getpid()) - before) / sessions
        for session in live:
            await session.close()
        manager, client = jupyter.start()
        Jupyter.run(client, FIRST)
        kernel_pid = manager.provisioner.process.pid  # type: ignore[union-attr]
        per_kernel = pss_kib({kernel_pid} | descendants(kernel_pid))
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    finally:
        if pool is not None:
            await pool.close()
    fresh_label = "first cell, fresh Jupyter kernel"
    targets = [
        Target("first cell, new session without the pool", cold, fresh_label, fresh, limit_s=FIRST_CELL_TARGET_S),
        Target(f"the first cell alone, without the pool, {think_s:g} s after the open", thought, fresh_label, fresh,
               limit_s=FIRST_CELL_TARGET_S),
        Target("floor: the first cell's code as one fresh python3 in a started sandbox", one_process, fresh_label,
               fresh, limit_s=FIRST_CELL_TARGET_S),
        Target("floor: `python3 -c pass` in a started sandbox", python_start, fresh_label, fresh),
        Target("warm cell, session (from the pool)", warm_pooled, "warm cell, Jupyter kernel", warm_jupyter, ratio=1.0),
        Target(f"warm cell, {concurrent} sessions at once", together, f"warm cell, {concurrent} Jupyter kernels at once",
               together_jupyter),
    ]  # fmt: skip
    rows = [
        "| step | runs | p50 ms | p95 ms | p99 ms |",
        "|---|---|---|---|---|",
        f"| first cell, new session from the warm pool (local sandbox) | {len(pooled)} | {ms(pooled)} |",
        f"| first cell, new session without the pool (local sandbox) | {len(cold)} | {ms(cold)} |",
        f"| first cell, fresh Jupyter kernel (no sandbox) | {len(fresh)} | {ms(fresh)} |",
        f"| floor: the first cell's code as one fresh python3 in a started sandbox | {len(one_process)} | {ms(one_process)} |",
        f"| floor: `python3 -c pass` in a started sandbox | {len(python_start)} | {ms(python_start)} |",
        f"| the first cell alone, from the pool (read_csv + groupby; imports done) | {len(pooled_cell)} | {ms(pooled_cell)} |",
        f"| the first cell alone, without the pool (kernel start + imports + read_csv + groupby) | {len(cold_cell)} | {ms(cold_cell)} |",
        f"| the first cell alone, without the pool, asked {think_s:g} s after the open (a model thinking) | {len(thought)} | {ms(thought)} |",
        f"| warm cell, session (from the pool) | {len(warm_pooled)} | {ms(warm_pooled)} |",
        f"| warm cell, session (without the pool) | {len(warm_cold)} | {ms(warm_cold)} |",
        f"| warm cell, Jupyter kernel | {len(warm_jupyter)} | {ms(warm_jupyter)} |",
        f"| warm cell, {concurrent} sessions at once (without the pool) | {len(together)} | {ms(together)} |",
        f"| warm cell, {concurrent} Jupyter kernels at once (a thread each) | {len(together_jupyter)} | {ms(together_jupyter)} |",
        "",
        "| memory with the frame loaded | PSS MiB | per GiB |",
        "|---|---|---|",
        f"| one live session (sandbox + kernel), mean of {sessions} | {per_session / 1024:.0f} | {1024 * 1024 / per_session:.0f} sessions |",
        f"| one Jupyter kernel | {per_kernel / 1024:.0f} | {1024 * 1024 / per_kernel:.0f} kernels |",
        "",
        f"Ratios: pool vs no pool {statistics.median(cold) / statistics.median(pooled):.1f}x faster first cell; "
        f"pool vs fresh Jupyter {statistics.median(fresh) / statistics.median(pooled):.1f}x; "
        f"warm cell session / Jupyter {statistics.median(warm_pooled) / statistics.median(warm_jupyter):.2f} "
        f"(without the pool {statistics.median(warm_cold) / statistics.median(warm_jupyter):.2f}); "
        f"{concurrent} at once, p50 {statistics.median(together) / statistics.median(together_jupyter):.2f}.",
        "",
        table_of_targets(targets),
        "",
        f"Load average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.",
    ]
    return "\n".join(rows), targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--warm-runs", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=4)
    parser.add_argument("--concurrent", type=int, default=8, help="sessions running cells at once")
    parser.add_argument("--concurrent-runs", type=int, default=20, help="warm cells per concurrent session")
    parser.add_argument("--think", type=float, default=3.0, help="seconds between an open and its first cell (a model thinking)")
    parser.add_argument("--write-docs", action="store_true", help=f"update the section in {DOCS}")
    args = parser.parse_args()
    text, _ = asyncio.run(measure(args.trials, args.warm_runs, args.sessions, args.concurrent, args.concurrent_runs, args.think))
    concurrent = args.concurrent
    print(text)
    if args.write_docs:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        section = (
            f"\n## Live sessions: first cell from the pool, without it, and Jupyter ({stamp})\n\n"
            f"Machine: {machine()}, load average {load} when it ended (shared with other work "
            "while measured: compare the ratios, "
            "taken side by side in one run, more than the absolute figures). First cell: from asking "
            "for a new session (or a fresh ipykernel) to the result of one cell that imports pandas, "
            f"reads the showcase CSV ({DATA.stat().st_size} bytes) and computes `{CELL}`; warm cell: "
            "that groupby again on the loaded frame. The pool's sandbox had numpy, pandas and "
            "matplotlib imported before it was claimed, and was refilled and idle before each "
            "measurement. Jupyter runs on the host, unsandboxed. A session's cell reaches its "
            "kernel over a channel kept open for the session (no sandbox command per cell). "
            f"Concurrent: {concurrent} sessions (or {concurrent} ipykernels, driven by one thread each "
            "from this process, so their clients share one GIL) each hold the frame and run their "
            "warm cells at once. Made by "
            "`python benchmarks/session_bench.py --write-docs`.\n\n" + text + "\n"
        )
        write_section("## Live sessions:", section)
        print(f"\nupdated {DOCS}")


if __name__ == "__main__":
    main()
