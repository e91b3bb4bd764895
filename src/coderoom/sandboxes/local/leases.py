"""Leases of local session folders: who owns one, and whether that owner is gone.

Each session folder (`coderoom-local-*` in the temp dir) gets a lease naming its owner when it
is made (`claim`). `host_dir.prune` removes the folders whose owner is gone (the shared `leases.abandoned`), first
killing any process still using one (`kill_users`: a launcher whose host was SIGKILLed dies by
itself, but nothing is assumed: a bwrap pid 1 its bwrap left blocked at start does not). A
folder without a lease is judged by age: a crash between creating it and writing the lease
leaves one, and it is removed once older than the shared `leases.LEASELESS_GRACE_S`. A live owner's folder is
never touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

from .. import records
from ..leases import LEASE_FILE, write_lease
from . import bwrap, cgroup, procfs

KILL_WAIT_S = 5.0  # for the processes `kill_users` killed to be gone


def claim(host_dir: Path) -> None:
    """Mark a new session folder as this process's."""
    write_lease(host_dir)


def take_over(host_dir: Path) -> None:
    """Make an abandoned session folder this process's (a resume adopting it, see `host_dir.adoptable`)."""
    (host_dir / LEASE_FILE).unlink(missing_ok=True)
    write_lease(host_dir)


def kill_users(folder: Path, group: Path | None, bwrap_group: int | None = None) -> None:
    """SIGKILL every process using `folder` and wait (up to KILL_WAIT_S) until they are gone.

    Users are found by the folder's path in their mounts (as root, the views namespace and
    everything started in it; the sandbox's binds) or command line, by membership of the
    session's memory cgroup `group`, and by being a bwrap pid 1 in the process group of the
    session's bwrap (`bwrap_group`). A path counts only for a process of the sandbox's side
    (`_sandbox_side`): anyone can name the folder (the user's `tail -f` on a file of it), and
    only what a session could have started is this function's to kill. Not by command line
    alone: bwrap gets its arguments in a memfd, so a bwrap pid 1 left blocked at start (see
    `spawn.kill_sandbox`) names no folder there, and on cgroup v2 it joins the memory cgroup only
    at the gate (see `gate`); it is still in its bwrap's group. The record is data (only this uid can write
    it, see `records`, but a group that ended frees its number for a later one), so only a pid
    namespace's init running as bwrap's uid (`bwrap.host_id`) is taken that way: as root,
    nothing that uid could not kill itself.
    """
    names = re.compile(re.escape(os.fsencode(folder)) + rb"[/\s\0]")  # not a longer name's prefix
    found = set(cgroup.members(group)) if group is not None else set()
    # only a group whose leader (that bwrap) is gone: a pid in use as a group id is never reused,
    # so its members are still that bwrap's; with the leader alive the number may be someone else's
    if bwrap_group is not None and os.path.exists(f"/proc/{bwrap_group}"):
        bwrap_group = None
    uid = bwrap.host_id()
    uid = os.getuid() if uid is None else uid  # bwrap's
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            named = any(names.search(Path(f"/proc/{pid}/{name}").read_bytes()) for name in ("cmdline", "mountinfo"))
            if named and _sandbox_side(procfs.status(int(pid)), uid):
                found.add(int(pid))
            elif bwrap_group is not None and _is_bwrap_init_in_group(int(pid), bwrap_group, uid):
                found.add(int(pid))
    found.discard(os.getpid())
    for member in found:
        with contextlib.suppress(OSError):
            os.kill(member, signal.SIGKILL)
    end = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < end and any(procfs.running(pid) for pid in found):
        time.sleep(0.02)


def recorded_group(record: Path) -> int | None:
    """The process group written in `record` (`host_dir.BWRAP_FILE`); a file is data: None
    unless it is a trusted record (see `records`) holding a plain pid above 1."""
    text = records.read(record.parent, record.name, 32)
    if text is None:
        return None
    return int(text) if text.isdigit() and len(text) <= 10 and int(text) > 1 else None


def record_group(record: Path, pid: int) -> None:
    """Write bwrap's pid (its process group) to `record`, best effort (see `recorded_group`)."""
    with contextlib.suppress(OSError):
        records.write(record.parent, record.name, str(pid).encode(), replace=True)


def _sandbox_side(fields: dict[str, list[str]], uid: int) -> bool:
    """Whether a process (its `procfs.status` fields) is one a session could have started:
    running as bwrap's `uid` (its real or saved uid: what that uid may signal itself) and either
    inside a nested pid namespace (everything bwrap starts) or a bwrap (the outer one, in the
    views namespace as root). A host process of the same uid (not root: the user's own) is in
    the host's pid namespace and is no bwrap, so naming the folder does not get it killed."""
    uids = fields.get("Uid", [])
    if len(uids) != 4 or str(uid) not in (uids[0], uids[2]):
        return False
    return len(fields.get("NSpid", [])) > 1 or fields.get("Name") == ["bwrap"]


def _is_bwrap_init_in_group(pid: int, group: int, uid: int) -> bool:
    """Whether `pid` is a bwrap whose process group is `group` (NSpgid as the host sees it), the
    init of a pid namespace, running as `uid`."""
    fields = procfs.status(pid)
    return (
        fields.get("Name") == ["bwrap"]
        and fields.get("NSpgid", [""])[0] == str(group)
        and procfs.is_namespace_init(fields)
        and fields.get("Uid") == [str(uid)] * 4
    )

