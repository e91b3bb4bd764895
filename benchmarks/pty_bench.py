#!/usr/bin/env python3
"""PTY sessions side by side: what a live process costs against a one-shot command, and what a
flood of output costs the host, on coderoom's backends and the SDK's UnixLocal (no isolation).

All backends are measured in the same run, through the SDK session API:

* exec: exec("true") round trip (a one-shot command)
* pty: pty_exec_start("true") until it reports its exit (a live process, pipes)
* tty: the same with tty=True (a terminal made inside the sandbox)
* flood: host RSS growth while `yes` writes for FLOOD_S seconds unpolled (output_bytes 1M)

    python benchmarks/pty_bench.py [--n 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agents.sandbox import Manifest

from coderoom.sandboxes import SandboxSpec, get_backend

FLOOD_S = 5.0
BACKENDS = ["local", "docker", "unix_local"]


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def _timed(n: int, step: Callable[[], Awaitable[Any]]) -> float:
    """Median milliseconds of `step` over n runs (after one warm-up)."""
    await step()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await step()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def _measure(name: str, n: int) -> list[str] | None:
    backend = get_backend(name, unconfined_no_isolation=name == "unix_local")
    spec = SandboxSpec(backend=name)
    if backend.unavailable_reason(spec):
        return None
    client, options = backend.client(spec)
    manifest = Manifest(root="/tmp/pty-bench") if name == "unix_local" else Manifest()
    session = await client.create(manifest=manifest, options=options)
    await session.start()
    try:

        async def live(tty: bool) -> None:
            update = await session.pty_exec_start("true", tty=tty, yield_time_s=5)
            assert update.exit_code == 0, update

        exec_ms = await _timed(n, lambda: session.exec("true"))
        pty_ms = await _timed(n, lambda: live(False))
        tty_ms = await _timed(n, lambda: live(True))
        before = _rss_mib()
        flood = await session.pty_exec_start("yes flood", yield_time_s=0.25)
        await asyncio.sleep(FLOOD_S)
        grown = _rss_mib() - before
        await session.pty_terminate_all()
        assert flood.process_id is not None
    finally:
        await session.aclose()
        await client.delete(session)
    return [name, f"{exec_ms:.1f}", f"{pty_ms:.1f}", f"{tty_ms:.1f}", f"{pty_ms / exec_ms:.2f}", f"{grown:+.1f}"]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20)
    args = parser.parse_args()
    rows = [row for name in BACKENDS if (row := await _measure(name, args.n)) is not None]
    header = ["backend", "exec ms", "pty ms", "tty ms", "pty/exec", f"flood {FLOOD_S:g} s RSS MiB"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    asyncio.run(main())
