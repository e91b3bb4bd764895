#!/usr/bin/env python3
"""Issue 25's speed targets in one run and one table, each beside its anchor measured in the same
run: a whole `sandbox run` against a bare `docker run`, a local session's start and command
against the SDK's UnixLocal (no isolation), a Docker session's start against the SDK's Docker, and
a live session's cells against a Jupyter kernel.

It runs the three benchmarks that own these figures (startup_bench, sandbox_bench, session_bench)
with fewer rounds than they take alone, one after another, and prints their targets together
with the load average before and after: the targets hold only on a quiet machine (load under
1.5), so a run above that says so.

    python benchmarks/speed_bench.py [--runs 15] [--sessions 30] [--trials 3] [--write-docs]
"""

from __future__ import annotations

import argparse
import asyncio
import os
from datetime import datetime, timezone

import sandbox_bench
import session_bench
import startup_bench
from docs_table import DOCS, machine, write_section
from targets import Target, table

SECTION = "## Speed targets (issue 25)"
QUIET_LOAD = 1.5


def measure(runs: int, sessions: int, trials: int) -> tuple[list[Target], list[str]]:
    """Every target, and the backends that could not run here."""
    startup_bench.byte_compile([])
    samples = startup_bench.measure(runs, [])
    variant = next(v for v in startup_bench.VARIANTS[1:] if f"{v} --help" in samples)  # entry script, else -m
    found = startup_bench.targets(samples, variant)
    backends, skipped = asyncio.run(
        sandbox_bench.run(["coderoom local", "SDK unix_local", "docker"], sessions, 1, fewer={"SDK docker": 3})
    )
    found += sandbox_bench.target_rows(backends)
    _, cells = asyncio.run(session_bench.measure(trials, 30, 1, 8, 20))
    return found + cells, skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="rounds of the whole-process commands")
    parser.add_argument("--sessions", type=int, default=30, help="sessions per sandbox backend (the SDK's Docker: 3)")
    parser.add_argument("--trials", type=int, default=3, help="first cells of each kind")
    parser.add_argument("--write-docs", action="store_true", help=f"update the section in {DOCS}")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    found, skipped = measure(args.runs, args.sessions, args.trials)
    load_after = os.getloadavg()[0]
    quiet = "" if max(load_before, load_after) < QUIET_LOAD else f" (not quiet: the targets are for a load under {QUIET_LOAD})"
    text = (
        table(found)
        + ("\n\nNot measured (unavailable here): " + ", ".join(skipped) if skipped else "")
        + f"\n\nLoad average (1 min) {load_before:.1f} at the start, {load_after:.1f} at the end{quiet}."
    )
    print(text)
    if args.write_docs:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        write_section(SECTION, (
            f"{SECTION} ({stamp})\n\n"
            f"Machine: {machine()}. Every target beside its anchor, measured in the same run; p50 of "
            "host-side wall time. The figures each benchmark prints alone, with more rounds, are in "
            "the sections below. Made by "
            f"`python benchmarks/speed_bench.py --runs {args.runs} --sessions {args.sessions} "
            f"--trials {args.trials} --write-docs`.\n\n" + text + "\n"
        ))  # fmt: skip
        print(f"\nupdated {DOCS}")


if __name__ == "__main__":
    main()
