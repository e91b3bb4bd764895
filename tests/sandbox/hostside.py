"""What the host can see of sandboxed processes, for tests that check nothing outlives a session,
and the waits of tests that act on a command once the host sees it under way."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def host_processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


async def until(condition: Callable[[], object], within: float = 5.0, step: float = 0.02) -> bool:
    """Whether `condition` came true within `within` seconds, asked each `step` (and once at the end)."""
    for _ in range(int(within / step)):
        if condition():
            return True
        await asyncio.sleep(step)
    return bool(condition())


async def seen_running(session: Any, command: str, marker: str, within: float = 5.0) -> asyncio.Future[Any]:
    """`command` started in `session`, once the host sees a process whose command line carries
    `marker`: the command's result to come."""
    started = asyncio.ensure_future(session.exec(command))
    assert await until(lambda: host_processes_with(marker), within), f"no process with {marker!r} within {within} s"
    return started


async def once_made(session: Any, code: str, name: str, within: float = 10.0) -> asyncio.Future[Any]:
    """Python `code` started in a local `session`, once it has made the file `name` in the
    workspace, or ended: the command's result to come (`done()` tells which)."""
    made = session._inner.sandbox.workspace_dir / name
    started = asyncio.ensure_future(session.exec("python3", "-c", code, shell=False))
    assert await until(lambda: made.exists() or started.done(), within), f"{name} not made within {within} s"
    return started


def memory_in_use() -> int:
    """Memory this test process and everything below it hold: its cgroup v1 memory usage, which
    other work on the machine does not move; else the host's MemTotal - MemAvailable."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        usage = Path("/sys/fs/cgroup/memory", path.lstrip("/"), "memory.usage_in_bytes")
        if "memory" in controllers.split(",") and usage.exists():
            return int(usage.read_text())
    info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()}
    return info["MemTotal"] - info["MemAvailable"]


def disk_free(path: Path) -> int:
    """Bytes free to an unprivileged user on the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize
