"""Which resource enforcement the local backend has on this machine, in one place: the seccomp
filter that fits it, and the text `coderoom sandbox info` prints (see `cgroup`, `disk`, `network`).
"""

from __future__ import annotations

from ..seccomp import NO_CGROUP_DENIED, Arch, build_filter
from . import cgroup


def seccomp_filter(arch: Arch) -> bytes:
    """The filter for every command: fallocate unsupported (disk is counted by what is written),
    and without a memory cgroup, memfd_create and shmget refused (nothing would count them)."""
    denied = NO_CGROUP_DENIED if cgroup.mode() is cgroup.Mode.NONE else ()
    return build_filter(arch, also_denied=denied, unsupported=("fallocate",))


def describe() -> str:
    """What each limit is enforced by here, one line each, for `coderoom sandbox info`."""
    from . import network  # asyncio: not for the filter, which `spawn` builds before asyncio loads
    mode = cgroup.mode()
    if mode is cgroup.Mode.NONE:
        memory = (
            "RLIMIT_AS per process only (no memory cgroup here: run as root with cgroup v1, or in a "
            "delegated cgroup v2 scope); /tmp and /dev/shm are size-capped tmpfs, memfd_create and "
            "shmget are refused, but several processes can each take the whole limit"
        )
    else:
        memory = f"{mode.value}: one cgroup per session counts every process, tmpfs and shared memory"
    egress = network.unavailable_reason()
    lines = {
        "memory": memory,
        "disk": "workspace_size counts allocated blocks (st_blocks) and deleted files still held "
        "open, polled every 0.25 s; fallocate is refused (EOPNOTSUPP); file_size is RLIMIT_FSIZE",
        "network": "off by default (only lo); network = true gives a namespace of its own through "
        + ("slirp4netns (no host loopback, no private or link-local ranges)" if egress is None else
           f"slirp4netns, which is unavailable here: {egress}"),
    }
    return "\n".join(f"{key}: {value}" for key, value in lines.items())
