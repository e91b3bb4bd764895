"""Shared by the benchmark scripts that time cells and weigh sessions: percentiles of samples in
milliseconds, the processes under a PID (read from /proc), and their proportional set size.

PSS (/proc/PID/smaps_rollup) splits each shared page among the processes mapping it, so the sum
over a set of processes is what they cost together, without counting a shared library once per
process (RSS would)."""

from __future__ import annotations

import os
from pathlib import Path


def at(samples: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `samples`, nearest rank."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def shown_ms(seconds: float) -> str:
    """Milliseconds, one decimal under 100 ms."""
    value = seconds * 1000
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def ms(samples: list[float], quantiles: tuple[float, ...] = (0.5, 0.95, 0.99)) -> str:
    """The quantiles of `samples` in milliseconds, as table cells ("p50 | p95 | p99")."""
    return " | ".join(shown_ms(at(samples, q)) for q in quantiles)


def parents() -> dict[int, int]:
    """Every live process's parent, by PID (a process gone while read is left out)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            found[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def descendants(root: int, parent_of: dict[int, int] | None = None) -> set[int]:
    """The processes under `root` (not `root` itself)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in (parent_of if parent_of is not None else parents()).items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def trees(root: int) -> dict[int, set[int]]:
    """Each child of `root` with every process under it: one sandbox per child, for a host
    process whose children are its sandboxes' outermost processes (bwrap)."""
    parent_of = parents()
    return {child: {child} | descendants(child, parent_of) for child, ppid in parent_of.items() if ppid == root}


def pss_kib(pids: set[int]) -> int:
    """The PSS of `pids` summed, in KiB (a process gone while read counts 0)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total
