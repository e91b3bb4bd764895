"""Local session start of two coderoom source trees, side by side in one process.

Whole-benchmark runs on a shared two-core machine spread by more than a change of a few percent
(docs/benchmarks.md), so a change to the start path is measured here: both trees are loaded in
one process (the old one as the package `coderoom_old`), and session starts (create, start, the
first `true`, close) alternate between them, the order swapped every round. Prints each tree's
p50 and the ratio new/old; run it against the same tree twice for the noise floor.

    git worktree add /tmp/old <rev>
    python benchmarks/paired_start.py /tmp/old/src src --n 200
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import os
import statistics
import sys
import time
from typing import Any

from agents.sandbox import Manifest
from agents.sandbox.session.sandbox_client import BaseSandboxClientOptions
from agents.sandbox.session.sandbox_session_state import SandboxSessionState


def _load_as(name: str, src: str) -> None:
    """The package in `src`/coderoom, imported under `name`."""
    spec = importlib.util.spec_from_file_location(
        name, f"{src}/coderoom/__init__.py", submodule_search_locations=[f"{src}/coderoom"]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


def _local_client(package: str, src: str) -> tuple[Any, Any]:
    sandboxes = importlib.import_module(f"{package}.sandboxes")
    local = importlib.import_module(f"{package}.sandboxes.local")
    assert local.__file__ is not None and local.__file__.startswith(os.path.abspath(src)), local.__file__
    client = local.LocalBackend().client(sandboxes.SandboxSpec(backend="local"))
    # the SDK keeps one class per type name: let the other tree register its own
    for base in (BaseSandboxClientOptions, SandboxSessionState):
        registry = getattr(base, "_subclass_registry", None)
        if registry is not None:
            registry.pop("coderoom_local", None)
    return client


async def _starts(clients: dict[str, tuple[Any, Any]], n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in clients}
    for round_ in range(n + 2):  # the first two rounds warm both trees up and are not counted
        for name in list(clients) if round_ % 2 == 0 else list(clients)[::-1]:
            client, options = clients[name]
            started = time.perf_counter()
            session = await client.create(manifest=Manifest(), options=options)
            await session.start()
            result = await session.exec("true", shell=False)
            elapsed = time.perf_counter() - started
            assert result.exit_code == 0
            await session.aclose()
            await client.delete(session)
            if round_ >= 2:
                times[name].append(elapsed * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", help="the old tree's src folder")
    parser.add_argument("new", help="the new tree's src folder")
    parser.add_argument("--n", type=int, default=200, help="session starts per tree")
    args = parser.parse_args()
    _load_as("coderoom_old", args.old)
    sys.path.insert(0, os.path.abspath(args.new))
    clients = {"old": _local_client("coderoom_old", args.old), "new": _local_client("coderoom", args.new)}
    load = os.getloadavg()[0]
    times = asyncio.run(_starts(clients, args.n))
    for name, values in times.items():
        print(f"{name}: p50 {statistics.median(values):.1f} ms, mean {statistics.mean(values):.1f} ms, n={len(values)}")
    ratio = statistics.median(times["new"]) / statistics.median(times["old"])
    print(f"ratio new/old (p50): {ratio:.2f}; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
