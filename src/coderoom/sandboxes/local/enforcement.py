"""Which resource enforcement the local backend has on this machine, in one place: the seccomp
filter that fits it, the address-space limit, and the text `coderoom sandbox info` prints (see
`cgroup`, `disk`, `network`).
"""

from __future__ import annotations

import resource

from ..seccomp import NO_CGROUP_DENIED, Arch, build_filter
from . import cgroup


def seccomp_filter(arch: Arch) -> bytes:
    """The filter for every command: fallocate unsupported (disk is counted by what is written),
    and without a memory cgroup, memfd_create and shmget refused (nothing would count them)."""
    denied = NO_CGROUP_DENIED if cgroup.mode() is cgroup.Mode.NONE else ()
    return build_filter(arch, also_denied=denied, unsupported=("fallocate",))


def address_space_limit(memory: int, *, counted_by_cgroup: bool) -> int:
    """RLIMIT_AS for every command of a session: none where a memory cgroup counts its memory,
    else `memory`.

    Address space is not memory: a run_python kernel with numpy, pandas and matplotlib imported
    maps about 430 MB (libraries, thread stacks, malloc arenas) while about 100 MB of it is
    resident, so an RLIMIT_AS equal to `memory` refused `import pandas` at 256M in a kernel
    although the same import fits in a plain process (issue 20). The cgroup charges what is really
    used, by every process, and names the limit when it kills; Docker's containers have it alone
    too. Without a cgroup, RLIMIT_AS is the only bound there is, so it stays at `memory`."""
    return resource.RLIM_INFINITY if counted_by_cgroup else memory


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
        memory = (
            f"{mode.value}: one cgroup per session counts every process, tmpfs and shared memory "
            "(no address-space limit: mapped is not used)"
        )
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
