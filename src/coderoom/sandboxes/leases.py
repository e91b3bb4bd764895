"""Leases: every sandbox resource names the process that owns it, so `prune` can tell leftovers
of a dead coderoom (SIGKILLed, OOM-killed, power cut) from resources of a live run.

An owner is (boot id, pid, start time): the start time (field 22 of /proc/PID/stat, clock ticks
since boot) tells a reused pid from the original, and the boot id tells a pid from before a
reboot. An owner is gone when, on this boot and in this PID namespace, no process has that pid with that
start time. An owner in another PID namespace (a coderoom in a container or under `unshare -p`
on the same machine) cannot be judged from here, so it is never taken for gone.
An owner from another boot is gone too: its process died with that boot. (A Docker engine on
another machine, via DOCKER_HOST, is out of reach: its containers are judged by the engine's
own boot, which is ours only when the engine runs here; see `docker.leases`.)

Local session folders hold a `lease` file (a record, see `records`: mode 0600, outside the
workspace, so the sandbox never sees it); Docker containers carry the same fields as labels.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import records

LEASE_FILE = "lease"
LEASELESS_GRACE_S = 600.0  # a folder without a lease (a crash between making it and writing one)
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str:
    return _BOOT_ID.read_text().strip()


def pid_namespace() -> int:
    """The inode of this process's PID namespace: pids mean something only within one."""
    return os.stat("/proc/self/ns/pid").st_ino


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (after the parenthesised command name), or None if no such pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[1].split()
    return int(fields[19])  # fields[0] is field 3 (state)


@dataclass(frozen=True)
class Owner:
    boot: str
    pid: int
    start: int
    pidns: int = 0  # 0: a lease written before namespaces were recorded, judged as ours

    @classmethod
    def me(cls) -> Owner:
        own = start_time(os.getpid())
        assert own is not None  # our own /proc entry always exists
        return cls(_boot_id(), os.getpid(), own, pid_namespace())

    def alive(self) -> bool:
        """False only when the owner is known to be gone; another namespace's owner counts as alive."""
        if self.boot != _boot_id():
            return False
        if self.pidns not in (0, pid_namespace()):
            return True
        return start_time(self.pid) == self.start


def write_lease(folder: Path) -> None:
    """Write this process's lease into `folder` (a fresh session folder), readable by us alone."""
    records.write(folder, LEASE_FILE, json.dumps(asdict(Owner.me())).encode())


def read_lease(folder: Path) -> Owner | None:
    """The owner named in `folder`'s lease, or None when there is none, it cannot be parsed or it
    is not a trusted record (see `records`)."""
    text = records.read(folder, LEASE_FILE, 4096)
    if text is None:
        return None
    try:
        data = json.loads(text)
        return Owner(str(data["boot"]), int(data["pid"]), int(data["start"]), int(data.get("pidns", 0)))
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):  # a record is data
        return None


def abandoned(folder: Path) -> bool:
    """Whether a session folder's owner is gone: its lease says so, or it has none and is older
    than LEASELESS_GRACE_S (a folder being made right now has none yet)."""
    owner = read_lease(folder)
    if owner is not None:
        return not owner.alive()
    try:
        return time.time() - os.lstat(folder).st_mtime > LEASELESS_GRACE_S
    except FileNotFoundError:
        return False
