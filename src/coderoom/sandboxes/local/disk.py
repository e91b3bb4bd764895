"""The workspace limit (`Limits.workspace_size`) as the disk sees it, for the local backend.

The workspace is a host directory, so what a session may take of the host's disk is what the
watchdog counts there, every 0.25 s while a command runs (and at its end):

* every entry by the larger of st_size and st_blocks * 512 (`tree.footprint`): a sparse file
  counts in full, and space reserved without growing a file counts too;
* `fallocate` is refused by seccomp (EOPNOTSUPP), so reservation cannot run ahead of the watchdog
  (glibc's posix_fallocate then writes zeros, which RLIMIT_FSIZE and the watchdog see);
* files deleted but still open, which no walk finds: the session's payload processes (bwrap's
  descendants below the launcher's own, `LAUNCHER_DEPTH`) are looked up through each of their
  threads' /proc/TID/fd and, as root, /proc/TID/map_files for the mappings /proc/TID/maps marks
  deleted (a deleted file kept only by an mmap), and each deleted regular file on the
  workspace's filesystem counts once (benchmarks/limits_bench.py prints what a full check of an
  idle session takes). The check at a command's end skips this look when no payload
  process is left (`LocalSandbox._payload_gone`).

Why counting rather than a size-limited filesystem: a loop-mounted image needs root, mkfs and a
host mount per session (left behind by a crash), and a tmpfs workspace would hold the workspace
in RAM. What counting leaves open: a deleted file whose only reference is an fd in flight in a
unix socket's queue (SCM_RIGHTS) is held by no process; the kernel bounds fds in flight by
RLIMIT_NOFILE (512 here) per user, each file by file_size. The overshoot is what a command
writes between two polls.

Long-lived processes (the run_python kernel) are checked the same way every 0.25 s, but walk
only when the session ran or wrote since the last walk (`activity`), and at least every 5 s:
an idle kernel costs one /proc scan per poll. A long walk spaces the next one by its own time;
the entry count (`too_many_entries`, about 14x cheaper than the walk) is taken at every poll with
activity all the same, so a process creating files as fast as it can is stopped within about one
poll's worth of files past the entry limit (tests/sandbox/test_local_processes.py).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from ...hostile import tree

# How deep under bwrap the processes are that run no payload code: bwrap's pid 1 (1), the
# launcher (2), and its children (3): each command's init and the preparer that clones them
# (see launcher_inner), which no command can reach or hand a file.
# Payload processes descend from a command's stub (4): an orphan goes to its namespace's init,
# never above, as nothing outlives that init in its namespace.
LAUNCHER_DEPTH = 3


def session_pids(bwrap_pid: int, *, below: int = 0) -> list[int]:
    """Host pids of every process of bwrap's sandbox (launcher, commands, their children), or
    only those more than `below` levels under bwrap.

    A walk down the process tree from bwrap (`/proc/PID/task/TID/children`), not a scan of all
    of /proc: every sandbox process descends from bwrap, since an orphan is re-parented to its
    command's PID-namespace init, itself the launcher's child. So the cost follows the
    session's own process count (bounded by `pids`), not the host's."""
    found: list[int] = []
    pending = [(bwrap_pid, 0)]
    while pending:
        pid, depth = pending.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError):
                    children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
                    pending.extend((int(c), depth + 1) for c in children)
        if depth > below:
            found.append(pid)
    return found


def activity(bwrap_pid: int | None) -> int:
    """A number that grows whenever the session runs or writes: CPU ticks (its own and its reaped
    children's) plus bytes and calls written, over its live processes; reaped processes' counts
    live on in their parents'. A cheap sign that anything ran since the last look."""
    total = 0
    for pid in session_pids(bwrap_pid) if bwrap_pid else []:
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
            io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
            total += int(io["wchar"]) + int(io["syscw"])
    return total


def held_deleted(pids: list[int], device: int) -> int:
    """Bytes of deleted regular files on `device` that the processes `pids` still hold open or mapped."""
    sizes: dict[int, int] = {}
    for pid in pids:
        for path in _held_paths(pid):
            with contextlib.suppress(OSError):
                st = os.stat(path)
                if st.st_nlink == 0 and st.st_dev == device and stat.S_ISREG(st.st_mode):
                    sizes[st.st_ino] = tree.footprint(st)
    return sum(sizes.values())


def _held_paths(pid: int) -> list[str]:
    """What to stat for `pid`: every open fd of each of its threads, and the /proc/TID/map_files
    entry of each mapping that /proc/TID/maps shows as " (deleted)" (the kernel marks every
    mapping of an unlinked file so; a file merely named so is looked at too). Statting every
    mapping, as before, took most of a command's check: about 60 per Python process (its
    libraries), all of them live files.

    Per thread, because /proc/PID/fd is the leader's file table only: a thread made without
    CLONE_FILES has one of its own, and a leader that exited alone (its other threads run on)
    shows none (S-P1, S-P2). Threads share one memory map (CLONE_THREAD needs CLONE_VM), so the
    mappings are read from the first thread that still has them."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:  # gone
        return []
    paths = []
    for tid in tids:
        with contextlib.suppress(OSError):
            paths += [f"/proc/{tid}/fd/{name}" for name in os.listdir(f"/proc/{tid}/fd")]
    for tid in tids:
        try:
            with open(f"/proc/{tid}/maps", "rb") as maps:
                lines = maps.read().splitlines()
        except OSError:
            continue
        if lines:
            break
    else:
        return paths
    for line in lines:
        if line.endswith(b" (deleted)"):
            start, _, end = line.split(b" ", 1)[0].partition(b"-")
            with contextlib.suppress(ValueError):  # map_files names carry no leading zeros
                paths.append(f"/proc/{tid}/map_files/{int(start, 16):x}-{int(end, 16):x}")
    return paths


def too_many_entries(workspace: Path) -> str | None:
    """Why the workspace is over its entry or depth limit, or None: the quick look (no stat per
    entry) that a watchdog takes every poll, so a loop creating files is caught within a poll of
    the limit rather than within a poll plus a full walk."""
    try:
        tree.count_entries(workspace)
    except tree.WorkspaceLimitError as exc:
        return f"workspace over its limits: {exc}"
    return None


def over_limit(workspace: Path, limit: int, bwrap_pid: int | None) -> str | None:
    """Why the workspace is over `limit` (naming it) or over its entry limit, or None."""
    reason = too_many_entries(workspace)
    if reason:
        return reason
    try:
        used = tree.usage(workspace)
    except tree.WorkspaceLimitError as exc:
        return f"workspace over its limits: {exc}"
    # the launcher's own processes hold no file of the payload's: none can pass them one
    payload = session_pids(bwrap_pid, below=LAUNCHER_DEPTH) if bwrap_pid else []
    held = held_deleted(payload, os.stat(workspace).st_dev)
    if used + held <= limit:
        return None
    detail = f" ({held} of them in deleted files still open)" if held else ""
    return (
        f"workspace is {used + held} bytes{detail}, over its workspace_size limit of {limit} bytes; "
        "command stopped"
    )
