#!/usr/bin/env python3
"""`coderoom batch --ray` against `coderoom batch --parallel N` on the same machine: the per-job
overhead of going through a Ray cluster (a task per job, inputs and run folder through the object
store, the record lines sent to the driver's actor), apart from what a batch pays once (the
driver's connect, Ray's workers starting and importing coderoom for the first jobs).

N small jobs (the offline analyst on a 10-day hourly CSV; no model server) run twice per round,
locally and on a one-machine Ray head on 127.0.0.1 (`--num-cpus` = N-parallel, started once,
stopped by its PID), the two interleaved round by round so load falls on both alike. Reported per
round and as medians: the batch's wall time from the command's spawn to its exit, the sum of the
jobs' own durations (batch.jsonl), and the overhead per job = (wall on Ray - wall local) / jobs.
The head's start and the driver's connect are reported apart (once per cluster, not per job).
Target (issue 23): overhead within 10 % of a local job's time. On a loaded machine the milliseconds
move with the load; run it on a quiet one before writing figures anywhere.

    python benchmarks/batch_ray_bench.py [--jobs 8] [--parallel 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMAND = [sys.executable, "-m", "coderoom"]
JOB_TOML = (
    'prompt = "Find abnormal energy use in input/e.csv and save output/anomalies.csv"\nmodel = "offline"\n'
    '[inputs]\n"input/e.csv" = "e.csv"\n[[outputs]]\npath = "output/anomalies.csv"\n'
)
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # Ray's servers on 127.0.0.1 only


def hourly_csv(hours: int = 240) -> str:
    rows = ["timestamp,energy_kwh"]
    for hour in range(hours):
        value = 50 + 10 * math.sin(hour / 24 * 2 * math.pi) + (200 if hour == 100 else 0)
        rows.append(f"2024-01-{1 + hour // 24:02d} {hour % 24:02d}:00,{value:.2f}")
    return "\n".join(rows) + "\n"


def job_folders(root: Path, count: int) -> list[Path]:
    folders = []
    for index in range(count):
        folder = root / f"job{index:02d}"
        folder.mkdir(parents=True)
        (folder / "coderoom.toml").write_text(JOB_TOML)
        (folder / "e.csv").write_text(hourly_csv())
        folders.append(folder)
    return folders


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}


def timed_batch(jobs: list[Path], out: Path, extra: list[str]) -> tuple[float, float, float, float, list[float]]:
    """(wall seconds, before the first job started, first start to last end, the jobs' own
    durations summed, each job's gap: its end line's time - its start line's - its own duration,
    in start order) of one batch; it must pass."""
    spawned = time.time()
    started = time.perf_counter()
    done = subprocess.run([*COMMAND, "batch", *map(str, jobs), "--out", str(out), *extra],
                          capture_output=True, text=True, env=environment())  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"batch {' '.join(extra)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    lines = [json.loads(line) for line in (out / "batch.jsonl").read_text().splitlines()]
    first = min(line["t"] for line in lines)
    span = max(line["t"] for line in lines) - first
    starts = {line["job"]: line["t"] for line in lines if line["event"] == "start"}
    ends = {line["job"]: line for line in lines if line["event"] == "end"}
    gaps = [ends[job]["t"] - t - ends[job]["duration_s"] for job, t in sorted(starts.items(), key=lambda kv: kv[1])]
    return wall, first - spawned, span, sum(line["duration_s"] for line in ends.values()), gaps


def start_head(cpus: int, temp_dir: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = temp_dir / "head.log"
    started = time.perf_counter()
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("ray")), "start", "--head", "--node-ip-address=127.0.0.1",
         f"--port={port}", "--disable-usage-stats", f"--num-cpus={cpus}", "--include-dashboard=false",
         f"--temp-dir={temp_dir}", "--block"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, **LOOPBACK_ENV}, start_new_session=True,
    )  # fmt: skip
    while "Ray runtime started" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.perf_counter() - started > 300:
            raise SystemExit(f"the Ray head did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    return process, f"127.0.0.1:{port}", time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cr-bench-", dir="/tmp"))
    jobs = job_folders(root / "jobs", args.jobs)
    head, address, head_s = start_head(args.parallel, root)
    print(f"ray head on {address} started in {head_s:.1f} s (pid {head.pid})")
    try:
        local, ray = [], []
        for round_ in range(args.rounds):
            local.append(timed_batch(jobs, root / f"local{round_}", ["--parallel", str(args.parallel)]))
            ray.append(timed_batch(jobs, root / f"ray{round_}", ["--parallel", str(args.parallel), "--ray", address]))
            for name, (wall, before, span, in_run, gaps) in (("local", local[-1]), ("ray", ray[-1])):
                first, rest = gaps[: args.parallel], gaps[args.parallel:]
                print(f"round {round_ + 1} {name:5}: {wall:5.1f} s wall = {before:4.1f} s before the first job "
                      f"+ {span:5.1f} s first start to last end (+ exit); {in_run / args.jobs:.2f} s/job in run; "
                      f"gap around a job's run: first wave {max(first):.2f} s, then median "
                      f"{statistics.median(rest or [0.0]):.3f} s")  # fmt: skip
    finally:
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=60)
    for name, per in (("wall", 0), ("span", 2)):
        local_s = statistics.median(r[per] for r in local)
        ray_s = statistics.median(r[per] for r in ray)
        slot = local_s / args.jobs * args.parallel
        overhead = (ray_s - local_s) / args.jobs
        print(f"median {name}: local {local_s:.1f} s, ray {ray_s:.1f} s for {args.jobs} jobs at --parallel "
              f"{args.parallel}; overhead {overhead:+.2f} s per job ({overhead / slot:+.0%} of a local job's "
              f"{slot:.2f} s slot)")  # fmt: skip
    print("wall includes the driver's connect; span and the first wave's gap the workers' start and first "
          "import (once per batch); the later gaps are the per-job cost of going through Ray")


if __name__ == "__main__":
    main()
