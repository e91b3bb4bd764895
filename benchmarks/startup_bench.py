#!/usr/bin/env python3
"""Whole-process start-up: a one-command local sandbox beside `docker run`, and `--help`.

Every command is a fresh process timed from spawn to exit (stdout and stderr discarded), all
of them interleaved round by round so load on the machine falls on each alike. `coderoom` is
timed three ways: the command on PATH (with pyenv, a bash shim that adds its own start), the
real entry-point script, and `python3 -m coderoom`. Targets: local `sandbox run -- true` under
half of `docker run --rm IMAGE true`; `coderoom --help` within 0.3 s.

    python benchmarks/startup_bench.py [--runs 20] [--write-docs]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from docs_table import DOCS, machine, write_section

from coderoom.sandboxes.docker.labels import DEFAULT_IMAGE

SECTION = "## Start-up: whole processes"
PYTHON = [sys.executable]
ENTRY_SCRIPT = Path(sys.executable).with_name("coderoom")  # what pip installed next to python
HELP_TARGET_S = 0.3


def commands() -> dict[str, list[str]]:
    """What to time, by label; the `coderoom` variants that exist here."""
    found: dict[str, list[str]] = {}
    for label, prefix in (
        ("coderoom (PATH)", [shutil.which("coderoom") or ""]),
        ("coderoom (entry script)", [str(ENTRY_SCRIPT)] if ENTRY_SCRIPT.is_file() else [""]),
        ("python3 -m coderoom", [*PYTHON, "-m", "coderoom"]),
    ):
        if prefix[0]:
            found[f"{label} sandbox run -- true"] = [*prefix, "sandbox", "run", "--sandbox", "local", "--", "true"]
            found[f"{label} --help"] = [*prefix, "--help"]
    if shutil.which("docker"):
        found["docker run --rm --network none IMAGE true"] = [
            "docker", "run", "--rm", "--network", "none", DEFAULT_IMAGE, "true",
        ]  # fmt: skip
    found["python3 -c pass"] = [*PYTHON, "-c", "pass"]
    return found


def time_once(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}")
    return elapsed


def measure(runs: int) -> dict[str, list[float]]:
    todo = commands()
    for argv in todo.values():  # warm caches (page cache, docker's image metadata) once each
        time_once(argv)
    samples: dict[str, list[float]] = {label: [] for label in todo}
    for _ in range(runs):
        for label, argv in todo.items():
            samples[label].append(time_once(argv))
    return samples


def report(samples: dict[str, list[float]]) -> str:
    median = {label: statistics.median(values) for label, values in samples.items()}
    rows = ["| command | runs | min ms | median ms | max ms |", "|---|---|---|---|---|"]
    for label, values in samples.items():
        rows.append(f"| `{label}` | {len(values)} | {min(values) * 1000:.0f} | {median[label] * 1000:.0f} | "
                    f"{max(values) * 1000:.0f} |")  # fmt: skip
    base = median["python3 -c pass"]
    docker = median.get("docker run --rm --network none IMAGE true")
    lines = ["", "| ratio of medians | value | target |", "|---|---|---|"]
    for label in samples:
        if label.endswith("sandbox run -- true"):
            variant = label.removesuffix(" sandbox run -- true")
            if docker is not None:
                ratio = median[label] / docker
                lines.append(f"| {variant} sandbox run / docker run | {ratio:.2f} | < 0.5 {'met' if ratio < 0.5 else 'MISSED'} |")
            lines.append(f"| {variant} sandbox run / python3 -c pass | {median[label] / base:.2f} | |")
        elif label.endswith("--help"):
            variant = label.removesuffix(" --help")
            met = "met" if median[label] <= HELP_TARGET_S else "MISSED"
            lines.append(f"| {variant} --help / python3 -c pass | {median[label] / base:.2f} | "
                         f"median <= {HELP_TARGET_S * 1000:.0f} ms {met} |")  # fmt: skip
    return "\n".join(rows + lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command")
    parser.add_argument("--write-docs", action="store_true", help=f"update the section in {DOCS}")
    args = parser.parse_args()
    text = report(measure(args.runs))
    print(text)
    if args.write_docs:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        section = (
            f"\n{SECTION} ({stamp})\n\n"
            f"Machine: {machine()}. Each command is a fresh process timed from spawn to exit, all "
            f"interleaved round by round. `IMAGE` is {DEFAULT_IMAGE}. `coderoom (PATH)` goes through "
            "pyenv's bash shim; `entry script` is the script pip installed; both then run the same "
            "Python. Targets: local `sandbox run -- true` under half of `docker run --rm IMAGE true`; "
            f"`coderoom --help` within {HELP_TARGET_S} s. Made by "
            f"`python benchmarks/startup_bench.py --runs {args.runs} --write-docs`.\n\n" + text + "\n"
        )
        write_section(SECTION, section)
        print(f"\nupdated {DOCS}")


if __name__ == "__main__":
    main()
