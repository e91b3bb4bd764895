"""Names coderoom gives Docker objects: the sandbox image (DEFAULT_IMAGE, read by `--help`), and
the labels on every container: what `prune` finds, and the lease naming the owner.

The owner labels (host pid, its start time, the host's boot id: see `sandboxes.leases`) let
`prune` remove only containers whose coderoom process is gone. A container whose labels name
another boot is left alone: the engine may serve several machines (DOCKER_HOST), and there its
owner may well be alive. Containers lacking the start-time label (made before leases) are
judged by their pid alone, and kept while any process has that pid.
"""

from __future__ import annotations

from ..leases import Owner, start_time

DEFAULT_IMAGE = "coderoom-sandbox:latest"  # built from inside/Dockerfile
LABEL = "coderoom.sandbox"
SESSION_LABEL = "coderoom.session"
CREATED_LABEL = "coderoom.created"
HOST_PID_LABEL = "coderoom.host-pid"
HOST_START_LABEL = "coderoom.host-start"
HOST_BOOT_LABEL = "coderoom.host-boot"
HOST_PIDNS_LABEL = "coderoom.host-pidns"
# init.py exits if the host has not attached by then (see inside/init.py, --contact-within)
CONTACT_WITHIN_S = 30.0


def owner_labels() -> dict[str, str]:
    owner = Owner.me()
    return {
        HOST_PID_LABEL: str(owner.pid),
        HOST_START_LABEL: str(owner.start),
        HOST_BOOT_LABEL: owner.boot,
        HOST_PIDNS_LABEL: str(owner.pidns),
    }


def owner_gone(labels: dict[str, str]) -> bool:
    """Whether the coderoom process that made a container with these labels is known to be gone."""
    try:
        pid = int(labels[HOST_PID_LABEL])
    except (KeyError, ValueError):
        return False
    if HOST_START_LABEL not in labels or HOST_BOOT_LABEL not in labels:
        return start_time(pid) is None
    try:
        start, pidns = int(labels[HOST_START_LABEL]), int(labels.get(HOST_PIDNS_LABEL, 0))
        owner = Owner(labels[HOST_BOOT_LABEL], pid, start, pidns)
    except ValueError:
        return False
    return owner.boot == Owner.me().boot and not owner.alive()
