"""The docker sandbox's seccomp profile: Docker's default profile with the local sandbox's policy on top.

Why not Docker's built-in profile: Docker 20.10 (Debian 12's docker.io) lets io_uring, AF_ALG and
AF_VSOCK sockets and i386 `int 0x80` syscalls through (catalogue KERN-07, KERN-11, KERN-10).
Upstream's profile is vendored unmodified as data (image/moby-seccomp-default.json, Apache-2.0,
see image/moby-seccomp-NOTICE); this module applies seccomp.py's policy to it, so both backends
deny the same calls from one list:

* native architecture only: archMap entries lose their sub-architectures, so i386 and x32
  syscalls hit libseccomp's bad-architecture action, which kills the process;
* every call in seccomp.py's deny list is removed from every allow rule (the default action
  answers EPERM);
* rules that only apply when the container holds a capability are dropped: it holds none, and
  granting one later must not reopen a call;
* `socket` and `personality` are allowed for seccomp.py's values only, comparing the low 32 bits
  as the kernel reads them (other families: EPERM);
* `ioctl` is allowed unless its request's low 32 bits are TIOCSTI or TIOCLINUX (CVE-2019-10063).
  libseccomp has no masked not-equal, so the allowed requests are written as the masked-equal
  patterns that cover every other 32-bit value (34 rules for the two requests).

Upstream already matches seccomp.py on clone's namespace flags and clone3's ENOSYS (a test checks).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from .seccomp import _DENY as DENIED_SYSCALLS
from .seccomp import ALLOWED_PERSONALITIES, ALLOWED_SOCKET_FAMILIES, DENIED_IOCTLS

UPSTREAM = Path(__file__).with_name("image") / "moby-seccomp-default.json"
_LOW_32_BITS = 0xFFFFFFFF
_BITS = 32


def patterns_avoiding(denied: set[int]) -> list[tuple[int, int]]:
    """(mask, value) pairs whose matches, `x & mask == value`, are exactly the 32-bit numbers not in
    `denied`: walking the bits from the top, each branch no denied number takes is one pattern."""
    if not denied:
        return [(0, 0)]
    patterns = []
    for depth in range(_BITS):
        high = _LOW_32_BITS ^ ((1 << (_BITS - depth)) - 1)  # the bits already walked
        bit = 1 << (_BITS - 1 - depth)
        for prefix in sorted({d & high for d in denied}):
            taken = {d & bit for d in denied if d & high == prefix}
            patterns += [(high | bit, prefix | b) for b in (0, bit) if b not in taken]
    return patterns


def _allow_if(name: str, index: int, mask: int, value: int) -> dict[str, Any]:
    condition = {"index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}
    return {"names": [name], "action": "SCMP_ACT_ALLOW", "args": [condition]}


def _argument_rules() -> list[dict[str, Any]]:
    rules = [_allow_if("socket", 0, _LOW_32_BITS, family) for family in ALLOWED_SOCKET_FAMILIES]
    rules += [_allow_if("personality", 0, _LOW_32_BITS, persona) for persona in ALLOWED_PERSONALITIES]
    rules += [_allow_if("ioctl", 1, mask, value) for mask, value in patterns_avoiding(set(DENIED_IOCTLS))]
    return rules


def build_profile(upstream: dict[str, Any]) -> dict[str, Any]:
    """`upstream` (a Docker seccomp profile) narrowed by coderoom's policy; the input is not changed."""
    arguments = _argument_rules()
    removed = set(DENIED_SYSCALLS) | {name for rule in arguments for name in rule["names"]}
    rules = []
    for rule in upstream["syscalls"]:
        if rule.get("includes", {}).get("caps"):
            continue
        names = [n for n in rule["names"] if n not in removed]
        if names:
            rules.append({**rule, "names": names})
    rules += arguments
    archs = [{**entry, "subArchitectures": None} for entry in upstream["archMap"]]
    return {**upstream, "archMap": archs, "syscalls": rules}


@cache
def profile_json() -> str:
    """The profile as Docker's `--security-opt seccomp=` takes it (the JSON text itself)."""
    upstream = json.loads(UPSTREAM.read_text())
    return json.dumps(build_profile(upstream), separators=(",", ":"))
