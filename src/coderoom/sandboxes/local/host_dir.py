"""A local sandbox's folder on the host: made private, found where bubblewrap's uid can reach it,
and reused or deleted only when it is provably one we made.

Layout of a session folder (prefix `coderoom-local-`, in the temp dir, owned by the user running
coderoom: mode 0700, or as root 0710 with bwrap's uid's group, so uid 65534 can reach what it
binds but never add, rename or remove an entry): `workspace/` (bwrap's uid's, bound at the
sandbox's workspace root, /workspace by default), as root `python-N/` mount points for the runtime views (see
`bwrap.views_namespace`), and outside what the sandbox sees, the records (see `records`):
`lease` (see `leases`), `cgroup` (the memory cgroup's path), `bwrap`, `session` (the SDK
session id it was made for, see `bind` and `adoptable`) and `run` (the run folder and run id it
serves, see `bind_run`: what recovery saves the workspace into when its owner died). Root trusts the records and removes
the folder because uid 65534 cannot write in it: when the folder itself was 65534's, that uid
could forge a record naming another session's cgroup, or swap entries for links under root's
feet (issue 19, docs/security.md).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ...errors import SandboxUnavailable
from ...hostile import tree
from .. import pruning, records
from ..leases import Owner, abandoned, read_lease
from . import bwrap, cgroup, leases

PREFIX = "coderoom-local-"
CGROUP_FILE = "cgroup"  # the session's memory cgroup, for `prune` (see `cgroup.remove_recorded`)
BWRAP_FILE = "bwrap"  # the pid of the session's latest bwrap, its process group: for `prune` (`leases.kill_users`)
EGRESS_SOCKET = "egress/proxy.sock"  # with an allowlist: the host proxy's socket, bound read-only at bwrap.EGRESS_DIR
SESSION_FILE = "session"  # the SDK session id the folder belongs to (see `bind`)
SHARED_MODE = 0o710  # as root: searchable by bwrap's uid's group, writable by us alone


def make(packages: Path | None = None, *, egress: bool = False) -> Path:
    """A new session folder with its workspace, which is bwrap's uid's. `packages`: a package
    environment's site-packages the sandbox will bind (see `bwrap.Runtime.binds`). With `egress`
    (an allowlist), `egress/` for the proxy's socket (`EGRESS_SOCKET`). The sandbox's /etc and
    venv skeleton are no files here: bwrap makes them in its own root (`bwrap.root_files`)."""
    host_dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent()))  # ours, mode 0700
    try:
        leases.claim(host_dir)  # `prune` reclaims the folder once this process is gone
        (host_dir / "workspace").mkdir(mode=0o700)
        if egress:
            (host_dir / EGRESS_SOCKET).parent.mkdir(mode=0o755)  # bwrap's uid connects to the socket in it
        ids = bwrap.host_id()
        if ids is not None:  # bwrap runs as this uid and must reach the workspace
            for index in range(len(bwrap.runtime().binds(packages))):
                (host_dir / f"python-{index}").mkdir(mode=0o755)  # mount points, see bwrap.views_namespace
            os.chown(host_dir / "workspace", ids, ids)
            os.chown(host_dir, -1, ids)  # bwrap's uid may reach its binds, never write here
            os.chmod(host_dir, SHARED_MODE)
    except BaseException:  # a signal (Interrupted) or an error: a half-made folder is not one
        tree.remove_tree(host_dir)  # `prune` would take (as root its mode is not yet SHARED_MODE)
        raise
    return host_dir


def python_mounts(
    host_dir: Path, packages: Path | None = None
) -> tuple[list[tuple[Path, str]], list[tuple[Path, Path]]]:
    """The runtime binds (with `packages`, a package environment's site-packages: see
    `bwrap.Runtime.binds`) as bwrap will see them, and (as root) the host source -> view binds
    that make them reachable for uid 65534 (see `bwrap.views_namespace`)."""
    rt = bwrap.runtime()
    binds = rt.binds(packages)
    views: list[tuple[Path, Path]] = []
    if bwrap.host_id() is not None:
        views = [(source, host_dir / f"python-{index}") for index, (source, _) in enumerate(binds)]
        binds = [(view, dest) for (_, view), (_, dest) in zip(views, binds)]
    return binds, views


def parent() -> Path:
    """Where session folders go: the temp dir, unless (as root) bwrap's uid cannot walk to it.

    A TMPDIR inside a private folder (pytest's /tmp/pytest-of-root/..., a 0700 home) would make
    bwrap fail with "Can't find source path": then the first system temp dir it can reach.
    """
    temp = Path(tempfile.gettempdir())
    ids = bwrap.host_id()
    if ids is None:
        return temp
    for candidate in (temp, Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")):
        if walkable(candidate, ids):
            return candidate
    raise SandboxUnavailable(
        f"the local sandbox needs a temp directory that uid {ids} can reach; "
        f"{temp}, /tmp, /var/tmp and /dev/shm are not. Set TMPDIR to one."
    )


def walkable(path: Path, uid: int) -> bool:
    """Whether `uid` (= gid, no other groups) may search every directory from / down to `path`."""
    try:
        real = path.resolve(strict=True)
        chain = [real, *real.parents]
        stats = [os.stat(p) for p in chain]
    except OSError:
        return False
    for st in stats:
        if not stat.S_ISDIR(st.st_mode):
            return False
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == uid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def owned(path: Path) -> bool:
    """Only a folder we made (our prefix, in the temp dir, ours and unwritable by anyone else, with
    the mode `make` gives it) is reused or deleted: never one bwrap's uid made or can write."""
    try:
        where = parent()
    except SandboxUnavailable:
        return False
    if path.parent != where or not path.name.startswith(PREFIX):
        return False
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    ids = bwrap.host_id()
    if ids is None:
        return records.trusted_folder(st) and stat.S_IMODE(st.st_mode) == 0o700
    return records.trusted_folder(st) and st.st_gid == ids and stat.S_IMODE(st.st_mode) == SHARED_MODE


def bind(folder: Path, session_id: str) -> None:
    """Record that `folder` (just made) belongs to SDK session `session_id`: a serialized state
    names its folder, and a state is hostile input, so `adoptable` compares this record."""
    records.write(folder, SESSION_FILE, session_id.encode())


def bind_run(folder: Path, run_dir: Path, owner: str) -> None:
    """Record that `folder`'s workspace belongs to the run folder `run_dir` (absolute) of the run
    `owner`, so a recovery after its owner process died knows where to save it (`bound_run`)."""
    records.bind_run(folder, run_dir, owner)


def bound_run(folder: Path) -> tuple[Path, str] | None:
    """The (run folder, run id) `bind_run` recorded, or None (see `records.bound_run`)."""
    bound = records.bound_run(folder)
    return None if bound is None else bound[:2]


def bound_session(folder: Path) -> str | None:
    """The SDK session id `bind` recorded (hex), or None."""
    data = records.read(folder, SESSION_FILE, 64)
    text = data.decode("ascii", "replace") if data is not None else ""
    return text if len(text) == 32 and all(c in "0123456789abcdef" for c in text) else None


def adoptable(folder: Path, session_id: str) -> bool:
    """Whether a resumed state for `session_id` may reuse `folder` (AP-R1): one we made, bound
    to that session, and not held by another live process (a live session of this process may
    be resumed, as a live container is). A folder whose owner is gone is taken over."""
    if not owned(folder):
        return False
    if records.read(folder, SESSION_FILE, 64) != session_id.encode():
        return False
    owner = read_lease(folder)
    if owner is None:
        return False
    if owner == Owner.me():
        return True
    if owner.alive():
        return False
    leases.take_over(folder)
    return True


def abandoned_folders() -> list[Path]:
    """Our session folders whose owner is gone (what `prune` removes), oldest name first."""
    try:
        folder_parent = parent()
    except SandboxUnavailable:
        return []
    return [f for f in sorted(folder_parent.glob(f"{PREFIX}*")) if _ours_abandoned(f)]


def prune(skipped: list[str] | None = None) -> int:
    """Remove session folders whose owner is gone (see `leases`); returns how many.

    A folder that cannot be removed (whatever it raises) is left, with one line naming it and
    why added to `skipped`, and the others are still pruned: one hostile folder never stops
    `prune` (issue 19; see `pruning`)."""
    try:
        folder_parent = parent()
    except SandboxUnavailable:
        return 0
    return sum(
        pruning.remove_held(folder, _reclaim, skipped, candidate=_ours_abandoned)
        for folder in sorted(folder_parent.glob(f"{PREFIX}*"))
    )


def _ours_abandoned(folder: Path) -> bool:
    """What `prune` removes: a folder we made whose owner is gone."""
    return owned(folder) and abandoned(folder)


def quiesce(folder: Path) -> None:
    """Kill what still uses an abandoned folder and remove its own cgroup; the files stay."""
    leases.kill_users(folder, cgroup.recorded(folder / CGROUP_FILE), leases.recorded_group(folder / BWRAP_FILE))
    cgroup.remove_recorded(folder / CGROUP_FILE)


def _reclaim(folder: Path) -> None:
    """Quiesce an abandoned folder, then remove it."""
    quiesce(folder)
    tree.remove_tree(folder)
