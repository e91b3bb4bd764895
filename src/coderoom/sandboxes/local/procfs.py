"""What the host reads of a process in /proc/PID/status: its parent, its pids and group ids in
each pid namespace, its uids and groups. Used to recognise a bwrap's pid 1 (the gate, `spawn`'s
kills, `prune`) without trusting anything the process could choose."""

from __future__ import annotations

from pathlib import Path


def status(pid: int) -> dict[str, list[str]]:
    """/proc/PID/status as {field: words}; {} if it cannot be read."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()
    return fields


def running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (a zombie holds no cgroup and no mount)."""
    return status(pid).get("State", ["Z"])[0] != "Z"


def is_namespace_init(fields: dict[str, list[str]]) -> bool:
    """Whether `fields` (of `status`) are those of pid 1 of a nested pid namespace (NSpid)."""
    ids = fields.get("NSpid", [])
    return len(ids) > 1 and ids[-1] == "1"
