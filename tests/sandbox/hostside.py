"""What the host can see of sandboxed processes, for tests that check nothing outlives a session."""

from __future__ import annotations

import os
from pathlib import Path


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
