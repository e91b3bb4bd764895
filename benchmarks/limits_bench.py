#!/usr/bin/env python3
"""Measure the local sandbox's resource limits under attack and print a table (issue 10).

* memory: the session cgroup's peak (the kernel's count of all the session held) under each
  pinning attack of tests/sandbox/test_local_limits.py, limit 256 MiB;
* disk: the workspace bytes at the moment the watchdog stopped a writer, limit 300 MiB;
* the long-lived (run_python kernel) watchdog: entries and bytes in the workspace when a fast
  writer in a long-lived process was stopped, against the entry cap and workspace_size;
* the cost of one workspace check.

    python benchmarks/limits_bench.py
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from sandbox.test_local_limits import PIN_ATTACKS, UNLINKED  # noqa: E402  one definition of the attacks

from coderoom.hostile import tree  # noqa: E402
from coderoom.sandboxes import Limits, SandboxSpec  # noqa: E402
from coderoom.sandboxes.local import cgroup  # noqa: E402
from coderoom.sandboxes.session import open_session  # noqa: E402

MiB = 2**20
ENTRIES = "import os\ni = 0\nwhile True:\n    open(f'f{i}', 'w').close()\n    i += 1\n"
BYTES = "import os\ni = 0\nwhile True:\n    with open(f'b{i}', 'wb') as f:\n        f.write(b'x' * 2**20)\n    i += 1\n"


def _count(workspace: Path) -> tuple[int, int]:
    entries = size = 0
    for entry in tree.walk(workspace):
        entries += 1
        size += tree.footprint(entry.st)
    return entries, size


async def memory_rows() -> list[str]:
    if cgroup.mode() is cgroup.Mode.NONE:
        return ["| memory | no memory cgroup here: not measured | | |"]
    rows = []
    for name, argv in PIN_ATTACKS.items():
        spec = SandboxSpec(backend="local", limits=Limits(memory=256 * MiB, tmp_size="2G"))
        async with open_session(spec) as session:
            result = await session.exec(*argv, shell=False)
            peak = session._inner._memory.peak()
        rows.append(f"| memory | {name} | 256 MiB | peak {peak / MiB:.0f} MiB, exit {result.exit_code} |")
    return rows


async def disk_rows() -> list[str]:
    spec = SandboxSpec(backend="local", limits=Limits(workspace_size="300M", memory="1G"))
    async with open_session(spec) as session:
        result = await session.exec("python3", "-c", UNLINKED, shell=False)
        held = result.stdout.count(b"held")
        started = time.perf_counter()
        for _ in range(20):
            session._inner._workspace_over_limit()
        check_ms = (time.perf_counter() - started) / 20 * 1000
    return [
        f"| disk | 20 x 100M written, kept open, unlinked | 300 MiB | stopped after {held} held "
        f"(<= {held * 100 + 100} MiB at once) |",
        f"| disk | one workspace check (walk + /proc fds), idle session | | {check_ms:.1f} ms |",
    ]


async def _kernel_writer(code: str, **limits: object) -> tuple[int, int, float]:
    """Entries and bytes in the workspace when the long-lived watchdog stopped `code`."""
    async with open_session(SandboxSpec(backend="local", limits=Limits(**limits))) as session:  # type: ignore[arg-type]
        started = await session.pty_exec_start("python3", "-c", code, shell=False, yield_time_s=0.1)
        begun = time.perf_counter()
        update = started
        while update.exit_code is None and time.perf_counter() - begun < 60:
            update = await session.pty_write_stdin(session_id=started.process_id, chars="", yield_time_s=1)
        elapsed = time.perf_counter() - begun
        return (*_count(session._inner.workspace_dir), elapsed)


async def watchdog_rows() -> list[str]:
    entries, _, seconds = await _kernel_writer(ENTRIES)
    _, size, seconds_b = await _kernel_writer(BYTES, workspace_size="64M")
    return [
        f"| kernel watchdog | empty files as fast as possible | {tree.MAX_ENTRIES} entries | "
        f"{entries} entries when stopped ({entries / tree.MAX_ENTRIES:.2f}x), after {seconds:.1f} s |",
        f"| kernel watchdog | 1 MiB files as fast as possible | 64 MiB | "
        f"{size / MiB:.0f} MiB when stopped ({size / (64 * MiB):.2f}x), after {seconds_b:.1f} s |",
    ]


async def main() -> None:
    rows = ["| limit | attack | limit value | measured |", "|---|---|---|---|"]
    for part in (memory_rows, disk_rows, watchdog_rows):
        rows += await part()
    print(f"local sandbox, {cgroup.mode().value}, Linux {os.uname().release}\n")
    print("\n".join(rows))


if __name__ == "__main__":
    asyncio.run(main())
