"""The bubblewrap probe's answer kept between processes, as data and never as trust.

`bwrap.probe` runs bwrap three times (`--help` twice and a smoke sandbox): about 10 ms of every
process that starts a local sandbox (`coderoom sandbox run -- true` takes about 100). So the
candidate that passed is written to `$XDG_CACHE_HOME/coderoom/bwrap-probe.json` (default
`~/.cache`), under a key of everything the answer depends on: each candidate's path and
identity (device, inode, size, mtime, ctime), the boot, the kernel release, the effective uid,
the sysctls that allow or forbid user namespaces, and the options coderoom requires.

Anyone who can write that folder can write the file, so what it says can only pick one of the
candidates this process found itself, and only while the key is exactly the current one. A
forged or stale answer is therefore at worst a bwrap that cannot build the sandbox here: it
then fails to start (SandboxFailed), and is never run with less isolation, because coderoom
passes every option it relies on and bwrap refuses options it lacks rather than ignore them.

A file that is not a small regular file of the expected shape is ignored and replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

MAX_BYTES = 65536  # far more than an entry takes
_FORMAT = 1
BWRAP = "bwrap-probe"  # the answer kept, one file
_SYSCTLS = (
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    "/proc/sys/kernel/random/boot_id",
)


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "coderoom", f"{BWRAP}.json")


def key(candidates: list[str], required: tuple[str, ...]) -> list[object]:
    """Everything the probe's answer depends on, as JSON-comparable data."""
    identities: list[object] = []
    for path in candidates:
        try:
            st = os.stat(path)
        except OSError:
            identities.append([path, None])
            continue
        identities.append([path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
    machine: list[object] = [os.uname().release, os.geteuid()]
    for name in _SYSCTLS:
        try:
            with open(name, "rb") as handle:
                machine.append(handle.read(256).decode(errors="replace").strip())
        except OSError:
            machine.append(None)
    return [_FORMAT, identities, machine, list(required)]


def load(candidates: list[str], required: tuple[str, ...]) -> str | None:
    """The candidate that passed under the current key, or None (no entry, stale, or not ours)."""
    try:
        fd = os.open(cache_file(), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = handle.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        return None
    try:
        entry = json.loads(data)
    except ValueError:
        return None
    if not isinstance(entry, dict) or entry.get("key") != key(candidates, required):
        return None
    path = entry.get("path")
    return path if isinstance(path, str) and path in candidates else None


def store(candidates: list[str], required: tuple[str, ...], path: str) -> None:
    """Record that `path` passed; best effort (a read-only home just means probing each time)."""
    target = cache_file()
    text = json.dumps({"key": key(candidates, required), "path": path})
    temp = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(temp, target)
    except OSError:
        with contextlib.suppress(OSError):
            temp.unlink()
