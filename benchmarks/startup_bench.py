#!/usr/bin/env python3
"""Whole-process start-up: a one-command local and docker sandbox beside `docker run`, and `--help`.

Every command is a fresh process timed from spawn to exit (stdout and stderr discarded), all
of them interleaved round by round so load on the machine falls on each alike: on a shared
machine the ratios are the result, the milliseconds move with the load. `coderoom` is timed
three ways: the command on PATH (with pyenv, a bash shim that adds its own start), the real
entry-point script, and `python3 -m coderoom`. `--also SRC` adds `python3 -m coderoom` run from
another checkout's `src` (say, the code before a change; its `sandbox run` forms and `--help`),
side by side in the same rounds.
Targets: local `sandbox run -- true` under half of `docker run --rm IMAGE true`; `sandbox run
--sandbox docker -- true` under 1.5 times it; `coderoom --help` within 0.3 s.

The package is byte-compiled first, as pip does on install: an editable install under
PYTHONDONTWRITEBYTECODE would otherwise compile every module in every process.

A second table splits one `sandbox run -- true` into its stages, timed inside a fresh process
each round (`STAGES`): what the whole-process figure is made of.

    python benchmarks/startup_bench.py [--runs 20] [--also ../before/src] [--write-docs]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from docs_table import DOCS, machine, write_section
from targets import Target
from targets import table as table_of_targets

import coderoom
from coderoom.sandboxes.docker.labels import DEFAULT_IMAGE

SECTION = "## Start-up: whole processes"
PYTHON = [sys.executable]
ENTRY_SCRIPT = Path(sys.executable).with_name("coderoom")  # what pip installed next to python
HELP_TARGET_S = 0.3
RUN = ["sandbox", "run", "--sandbox", "local", "--", "true"]
DOCKER_RUN = ["sandbox", "run", "--sandbox", "docker", "--", "true"]
DOCKER_TARGET = 1.5  # docker `sandbox run` / bare `docker run`
LOCAL_TARGET = 0.5  # local `sandbox run` / bare `docker run`
DOCKER = "docker run --rm --network none IMAGE true"
FAST_IMPORTS = "import coderoom.cli.sandbox_run, coderoom.sandboxes.oneshot, coderoom.sandboxes.local.sandbox"

# One `sandbox run -- true`, stage by stage, as the fast path runs it; prints [[stage, seconds]].
STAGES = """
import time
started = time.perf_counter()
from types import SimpleNamespace
from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.local import backend
marks = [("coderoom's light modules (errors, registry, limit values)", time.perf_counter())]
def mark(name):
    marks.append((name, time.perf_counter()))
early = backend.prestart(SimpleNamespace(backend="local", limits=Limits()))
mark("prestart: bwrap modules, probe (cached), folder, cgroup, views namespace, bwrap spawned")
import asyncio, json
import coderoom.cli.sandbox_run, coderoom.sandboxes.oneshot, coderoom.sandboxes.local.sandbox
mark("asyncio and the sandbox code load (the launcher starts meanwhile)")
async def main():
    sandbox = await early.finish(); mark("the launcher adopted by the event loop")
    await sandbox.exec(["true"]); mark("`true` run and reaped (waits for the launcher if not ready)")
    await sandbox.close(); mark("launcher stopped, cgroup and folder removed")
asyncio.run(main())
print(json.dumps([(name, at - before) for (name, at), (_, before) in zip(marks, [("", started)] + marks)]))
"""


def commands(also: list[Path]) -> dict[str, tuple[list[str], dict[str, str] | None]]:
    """What to time, by label, with the environment to run it in (None: ours)."""
    found: dict[str, tuple[list[str], dict[str, str] | None]] = {}
    for label, prefix in (
        ("coderoom (PATH)", [shutil.which("coderoom") or ""]),
        ("coderoom (entry script)", [str(ENTRY_SCRIPT)] if ENTRY_SCRIPT.is_file() else [""]),
        ("python3 -m coderoom", [*PYTHON, "-m", "coderoom"]),
    ):
        if prefix[0]:
            found[f"{label} sandbox run -- true"] = ([*prefix, *RUN], None)
            if shutil.which("docker"):
                found[f"{label} sandbox run --sandbox docker -- true"] = ([*prefix, *DOCKER_RUN], None)
            found[f"{label} --help"] = ([*prefix, "--help"], None)
    for src in also:
        env = {**os.environ, "PYTHONPATH": str(src)}
        found[f"python3 -m coderoom ({src}) sandbox run -- true"] = ([*PYTHON, "-m", "coderoom", *RUN], env)
        if shutil.which("docker"):
            found[f"python3 -m coderoom ({src}) sandbox run --sandbox docker -- true"] = (
                [*PYTHON, "-m", "coderoom", *DOCKER_RUN], env
            )
        found[f"python3 -m coderoom ({src}) --help"] = ([*PYTHON, "-m", "coderoom", "--help"], env)
    if shutil.which("docker"):
        found[DOCKER] = (["docker", "run", "--rm", "--network", "none", DEFAULT_IMAGE, "true"], None)
    found["python3 -c 'import (the fast path's modules)'"] = ([*PYTHON, "-c", FAST_IMPORTS], None)
    found["python3 -c pass"] = ([*PYTHON, "-c", "pass"], None)
    return found


def time_once(argv: list[str], env: dict[str, str] | None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}")
    return elapsed


def measure(runs: int, also: list[Path]) -> dict[str, list[float]]:
    todo = commands(also)
    for argv, env in todo.values():  # warm caches (page cache, docker's image metadata, bwrap probe) once each
        time_once(argv, env)
    samples: dict[str, list[float]] = {label: [] for label in todo}
    for _ in range(runs):
        for label, (argv, env) in todo.items():
            samples[label].append(time_once(argv, env))
    return samples


def stages(runs: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for _ in range(runs):
        done = subprocess.run([*PYTHON, "-c", STAGES], capture_output=True, text=True, check=True)
        for name, seconds in json.loads(done.stdout):
            found.setdefault(name, []).append(seconds)
    return found


VARIANTS = ("coderoom (PATH)", "coderoom (entry script)", "python3 -m coderoom")


def targets(samples: dict[str, list[float]], variant: str) -> list[Target]:
    """The start-up targets for one way of starting coderoom, each beside its anchor."""
    docker = samples.get(DOCKER, [])
    found = [Target(f"`{variant} sandbox run -- true`", samples[f"{variant} sandbox run -- true"], f"`{DOCKER}`",
                    docker, ratio=LOCAL_TARGET)]  # fmt: skip
    if f"{variant} sandbox run --sandbox docker -- true" in samples:
        found.append(Target(f"`{variant} sandbox run --sandbox docker -- true`",
                            samples[f"{variant} sandbox run --sandbox docker -- true"], f"`{DOCKER}`", docker,
                            ratio=DOCKER_TARGET))  # fmt: skip
    found.append(Target(f"`{variant} --help`", samples[f"{variant} --help"], "`python3 -c pass`",
                        samples["python3 -c pass"], limit_s=HELP_TARGET_S))  # fmt: skip
    return found


def report(samples: dict[str, list[float]], also: list[Path]) -> str:
    median = {label: statistics.median(values) for label, values in samples.items()}
    rows = ["| command | runs | min ms | median ms | max ms |", "|---|---|---|---|---|"]
    for label, values in samples.items():
        rows.append(f"| `{label}` | {len(values)} | {min(values) * 1000:.0f} | {median[label] * 1000:.0f} | "
                    f"{max(values) * 1000:.0f} |")  # fmt: skip
    present = [variant for variant in VARIANTS if f"{variant} --help" in samples]
    lines = ["", table_of_targets([target for variant in present for target in targets(samples, variant)])]
    lines += ["", "| ratio of medians | value |", "|---|---|"]
    for variant in present:
        lines.append(f"| {variant} sandbox run / python3 -c pass | "
                     f"{median[f'{variant} sandbox run -- true'] / median['python3 -c pass']:.2f} |")  # fmt: skip
    now = median["python3 -m coderoom sandbox run -- true"]
    docker = median.get(DOCKER)
    for src in also:
        before = median[f"python3 -m coderoom ({src}) sandbox run -- true"]
        lines.append(f"| python3 -m coderoom sandbox run, this code / {src} | {now / before:.2f} |")
        for what, command in (("sandbox run --sandbox docker", " sandbox run --sandbox docker -- true"), ("--help", " --help")):
            if f"python3 -m coderoom ({src}){command}" in median:
                ratio = median[f"python3 -m coderoom{command}"] / median[f"python3 -m coderoom ({src}){command}"]
                lines.append(f"| python3 -m coderoom {what}, this code / {src} | {ratio:.2f} |")
        if docker is not None:
            lines.append(f"| python3 -m coderoom ({src}) sandbox run / docker run | {before / docker:.2f} |")
    return "\n".join(rows + lines)


def stage_report(found: dict[str, list[float]]) -> str:
    rows = ["| stage of one `sandbox run -- true` (in-process) | runs | median ms |", "|---|---|---|"]
    for name, values in found.items():
        rows.append(f"| {name} | {len(values)} | {statistics.median(values) * 1000:.1f} |")
    total = sum(statistics.median(values) for values in found.values())
    rows.append(f"| sum of the medians | | {total * 1000:.1f} |")
    return "\n".join(rows)


def byte_compile(also: list[Path]) -> None:
    """As pip does on install: an editable install under PYTHONDONTWRITEBYTECODE would otherwise
    compile every module in every process."""
    for package in [Path(coderoom.__file__).parent, *(src / "coderoom" for src in also)]:
        compileall.compile_dir(package, quiet=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command")
    parser.add_argument("--also", type=Path, action="append", default=[], help="another checkout's src to time")
    parser.add_argument("--write-docs", action="store_true", help=f"update the section in {DOCS}")
    args = parser.parse_args()
    also = [src.resolve() for src in args.also]
    byte_compile(also)
    load_before = os.getloadavg()[0]
    text = report(measure(args.runs, also), also) + "\n\n" + stage_report(stages(args.runs))
    text += f"\n\nLoad average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end."
    print(text)
    if args.write_docs:
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        section = (
            f"\n{SECTION} ({stamp})\n\n"
            f"Machine: {machine()}. Each command is a fresh process timed from spawn to exit, all "
            f"interleaved round by round. `IMAGE` is {DEFAULT_IMAGE}. `coderoom (PATH)` goes through "
            "the first `coderoom` on PATH; `entry script` is the script pip installed; both then run "
            "the same Python. Byte-compiled first, as pip installs. Targets: local `sandbox run -- true` "
            "under half of `docker run --rm --network none IMAGE true`; `sandbox run --sandbox docker -- true` "
            f"under {DOCKER_TARGET} times it; "
            f"`coderoom --help` within {HELP_TARGET_S} s. Made by "
            f"`python benchmarks/startup_bench.py --runs {args.runs}"
            + "".join(" --also SRC" for _ in also)
            + " --write-docs`.\n\n" + text + "\n"
        )
        write_section(SECTION, section)
        print(f"\nupdated {DOCS}")


if __name__ == "__main__":
    main()
