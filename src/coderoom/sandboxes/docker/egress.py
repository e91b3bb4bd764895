"""An allowlisted Docker sandbox's way out: the host folder of its egress proxy's socket.

The container has `network none` (only lo); the session's proxy (`coderoom.egress`, the local
backend's own) listens on a Unix socket in a host folder of the session's own, bound read-only
at INSIDE_DIR, and init.py's forwarder relays 127.0.0.1:FORWARDER_PORT to it (see
`inside/init.py`). A socket in a read-only bind can still be connected to.

Who may connect: the container runs as SANDBOX_UID, which must search the folder; nothing else
on the host should. As root the folder is ours with SANDBOX_UID's group and mode 0710 (that
group may only pass through it); when we are SANDBOX_UID, 0700; any other user cannot give
the folder to SANDBOX_UID, so it gets 0711 (others may pass through, never list: the name
comes from `mkdtemp`). The socket itself is 0666 (`egress.proxy`): the folder guards it.

Lifetime: the folder holds a lease (`leases`); `DockerSandbox.close` stops the proxy and
removes it; `prune` removes the folders whose owner is gone (a killed host's container went
with its stdin, see `request`), and a name is never reused, so nothing left trips a restart.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ...hostile import tree
from .. import pruning, records
from ..leases import abandoned, write_lease

PREFIX = "coderoom-egress-docker-"  # not under bindings.PREFIX, "coderoom-docker-": another record
SOCKET_NAME = "proxy.sock"
INSIDE_DIR = "/run/coderoom-egress"  # where the container sees the folder, read-only
INSIDE_SOCKET = f"{INSIDE_DIR}/{SOCKET_NAME}"


def _mode(uid: int) -> tuple[int, int]:
    """The folder's mode and group (-1: left as is) for the container's `uid` to reach the socket."""
    if os.geteuid() == 0:
        return 0o710, uid
    if os.geteuid() == uid:
        return 0o700, -1
    return 0o711, -1


def make(uid: int) -> Path:
    """A new socket folder for a container running as `uid` (SANDBOX_UID), with this process's
    lease (see the module docstring)."""
    folder = Path(tempfile.mkdtemp(prefix=PREFIX))
    try:
        write_lease(folder)
        mode, group = _mode(uid)
        os.chown(folder, -1, group)
        os.chmod(folder, mode)
    except BaseException:
        tree.remove_tree(folder)
        raise
    return folder


def socket_of(folder: Path) -> Path:
    return folder / SOCKET_NAME


def owned(folder: Path) -> bool:
    """Only a folder we made (our prefix, in the temp dir, ours and unwritable by others) is removed."""
    if folder.parent != Path(tempfile.gettempdir()) or not folder.name.startswith(PREFIX):
        return False
    try:
        return records.trusted_folder(os.lstat(folder))
    except OSError:
        return False


def remove(folder: Path) -> None:
    """Delete a socket folder we made (a proxy's socket in it is removed with it)."""
    if owned(folder):
        tree.remove_tree(folder)


def prune(skipped: list[str] | None = None) -> int:
    """Remove the socket folders whose owner is gone (`leases.abandoned`: a folder `make` did
    not finish too, once past its grace); returns how many. The step and its "left in place"
    line in `skipped` are `pruning.remove_held`'s (attack R-F13)."""
    temp = Path(tempfile.gettempdir())
    try:
        entries = [temp / name for name in os.listdir(temp) if name.startswith(PREFIX)]
    except OSError:
        return 0
    return sum(pruning.remove_held(folder, tree.remove_tree, skipped, candidate=_abandoned) for folder in sorted(entries))


def _abandoned(folder: Path) -> bool:
    """A socket folder of ours whose owner is gone."""
    return owned(folder) and abandoned(folder)
