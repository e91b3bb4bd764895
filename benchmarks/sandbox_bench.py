#!/usr/bin/env python3
"""Sandbox backends side by side: start, exec round trip, a pandas step, close.

Every backend is one entry in BACKENDS (a label and a function returning a client and its
options, or None when it cannot run here). All entries are measured in the same run, on the
host, through the SDK session API:

* start: create -> start -> first exec("true") returns
* exec: exec("true") round trip on a started session
* pandas: exec(python3 -c 'import pandas; ...') round trip
* close: aclose() + client.delete()

    python benchmarks/sandbox_bench.py [--n 30] [--n-python 5] [--only local] [--write]

A second table puts issue 25's targets for coderoom local (start, command) beside the same
figures of the SDK's UnixLocal, measured in the same run (benchmarks/targets.py);
benchmarks/speed_bench.py runs this with the other speed benchmarks for one table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agents.sandbox import Manifest
from docs_table import DOCS, machine, write_section
from targets import Target
from targets import table as table_of_targets

from coderoom.sandboxes import SandboxSpec, backend_names, get_backend
from coderoom.sandboxes.docker.labels import DEFAULT_IMAGE

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Sandbox backends: start, exec, close"
PANDAS = "import pandas as pd; print(pd.DataFrame({'x': range(1000)}).x.sum())"

ClientFactory = Callable[[], tuple[Any, Any] | None]


def _coderoom(name: str) -> ClientFactory:
    def make() -> tuple[Any, Any] | None:
        spec = SandboxSpec(backend=name)
        try:
            backend = get_backend(name, unconfined_no_isolation=name == "unix_local")
        except Exception:  # module not there yet
            return None
        return None if backend.unavailable_reason(spec) else backend.client(spec)

    return make


def _sdk_docker() -> tuple[Any, Any] | None:
    try:
        import docker
        from agents.sandbox.sandboxes.docker import DockerSandboxClient, DockerSandboxClientOptions

        engine = docker.from_env()
        engine.images.get(DEFAULT_IMAGE)
    except Exception:
        return None
    return DockerSandboxClient(engine), DockerSandboxClientOptions(image=DEFAULT_IMAGE, network_mode="none")


# every backend coderoom offers, beside the SDK's own two as baselines
BACKENDS: list[tuple[str, ClientFactory]] = [
    *((f"coderoom {name}", _coderoom(name)) for name in backend_names()),
    ("SDK unix_local (no isolation)", _coderoom("unix_local")),
    ("SDK docker", _sdk_docker),
]


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


async def measure(client: Any, options: Any, n: int, n_python: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"start": [], "exec": [], "pandas": [], "close": []}
    for index in range(n):
        began = time.perf_counter()
        session = await client.create(manifest=Manifest(), options=options)
        await session.start()
        await session.exec("true", shell=False)
        times["start"].append(time.perf_counter() - began)
        for _ in range(3):
            began = time.perf_counter()
            result = await session.exec("true", shell=False)
            times["exec"].append(time.perf_counter() - began)
            assert result.exit_code == 0
        if index < n_python:
            began = time.perf_counter()
            result = await session.exec("python3", "-c", PANDAS, shell=False)
            times["pandas"].append(time.perf_counter() - began)
            assert result.exit_code == 0, result.stderr
        began = time.perf_counter()
        await session.aclose()
        await client.delete(session)
        times["close"].append(time.perf_counter() - began)
    return times


ANCHOR = "SDK unix_local (no isolation)"


def target_rows(results: dict[str, dict[str, list[float]]]) -> list[Target]:
    """Issue 25's targets for coderoom local, each beside the SDK's UnixLocal (no isolation) in
    the same run, and coderoom docker's start beside the SDK's Docker (no target: an anchor)."""
    rows = []
    ours, anchor = results.get("coderoom local"), results.get(ANCHOR, {})
    if ours is not None:
        rows += [
            Target("local session start (create, start, first `true`)", ours["start"], ANCHOR, anchor.get("start", []),
                   limit_s=0.025),
            Target("local command (`true` round trip)", ours["exec"], ANCHOR, anchor.get("exec", []), limit_s=0.003),
        ]  # fmt: skip
    if "coderoom docker" in results:
        sdk = results.get("SDK docker", {})
        rows.append(Target("docker session start (create, start, first `true`)", results["coderoom docker"]["start"],
                           "SDK docker", sdk.get("start", [])))  # fmt: skip
    return rows


def table(results: dict[str, dict[str, list[float]]]) -> str:
    rows = [
        "| backend | start p50 | start p95 | exec p50 | exec p95 | pandas p50 | pandas p95 | close p50 | close p95 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, times in results.items():
        cells = []
        for key in ("start", "exec", "pandas", "close"):
            p50, p95 = percentiles(times[key])
            cells += [f"{p50:.1f}", f"{p95:.1f}"]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


async def run(only: list[str], n: int, n_python: int,
              fewer: dict[str, int] | None = None) -> tuple[dict[str, dict[str, list[float]]], list[str]]:
    """Measure every backend whose label contains a part of `only` (all when empty), `n` sessions
    each (`fewer` lowers it for a label); the backends that could not run, with why."""
    results: dict[str, dict[str, list[float]]] = {}
    skipped: list[str] = []
    for label, factory in BACKENDS:
        if only and not any(part in label for part in only):
            continue
        made = factory()
        if made is None:
            skipped.append(label)
            continue
        client, options = made
        try:
            await measure(client, options, 2, 1)  # warm-up: imports, caches, first image use
            results[label] = await measure(client, options, (fewer or {}).get(label, n), n_python)
        except Exception as exc:  # report it and measure the others
            skipped.append(f"{label} (failed: {type(exc).__name__}: {str(exc)[:120]})")
    return results, skipped


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=30, help="sessions per backend")
    parser.add_argument("--n-python", type=int, default=5, help="pandas steps per backend")
    parser.add_argument("--only", action="append", default=[], help="measure only backends whose label contains this")
    parser.add_argument("--write", action="store_true", help=f"update the section in {DOCS}")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results, skipped = await run(args.only, args.n, args.n_python)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    text = (
        f"{SECTION} ({stamp})\n\n"
        f"Machine: {machine()}. Milliseconds, host-side wall time through the SDK session API; "
        f"{args.n} sessions per backend (exec: 3 per session; pandas: {args.n_python}). "
        "coderoom local starts one bubblewrap per session (user, network, UTS and cgroup "
        "namespaces, no network) running a launcher; every command gets fresh PID, mount and IPC "
        "namespaces, a fresh /proc, /tmp and /dev/shm, no capabilities, seccomp and rlimits. "
        "Targets for coderoom local (issue 25): start p50 <= 25, exec p50 <= 3, close p50 <= 10. "
        + (
            "This run was as root: the session's bwrap then starts as uid 65534, spawned by a "
            "host thread that takes that uid and enters a per-session mount namespace that makes "
            "the runtime reachable for itself alone (local/unprivileged.py, bwrap.views_namespace). "
            if os.geteuid() == 0
            else ""
        )
        + f"Made by `python benchmarks/sandbox_bench.py --n {args.n} --write`.\n\n"
        + table(results)
        + ("\n\n" + table_of_targets(target_rows(results)) if target_rows(results) else "")
        + ("\n\nNot measured (unavailable here): " + ", ".join(skipped) if skipped else "")
        + f"\n\nLoad average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end.\n"
    )
    print(text)
    if args.write:
        write_section(SECTION, text)


if __name__ == "__main__":
    asyncio.run(main())
