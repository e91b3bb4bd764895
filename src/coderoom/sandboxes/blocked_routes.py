"""What `network = true` never reaches, on every backend: one list, used by local (`ip route add
prohibit` in the session's namespace) and docker (the same routes in the container's namespace).

IPv4 ranges that are not the public internet (RFC 6890: private, CGNAT, link-local with the
cloud metadata address, documentation, multicast, reserved), and each IPv4 address of the host's
own interfaces when the session starts. IPv6 is off on both backends, so it needs no list.
"""

from __future__ import annotations

PROHIBITED = (
    "0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 169.254.0.0/16 172.16.0.0/12 192.0.0.0/24 192.0.2.0/24 "
    "192.88.99.0/24 192.168.0.0/16 198.18.0.0/15 198.51.100.0/24 203.0.113.0/24 224.0.0.0/4 240.0.0.0/4"
).split()


def host_addresses() -> list[str]:
    """The host's own IPv4 addresses (read from `ip`, nothing is sent)."""
    import subprocess  # here: docker's create request names this module's neighbours on the CLI's fast path

    done = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=10)
    words = [line.split() for line in done.stdout.splitlines()]
    return [w[3].split("/")[0] for w in words if len(w) > 3 and not w[3].startswith("127.")]


def prohibited_targets(*extra_addresses: str) -> list[str]:
    """Every range and address a sandbox with network on must not reach, as CIDRs, once each:
    PROHIBITED, the host's addresses and `extra_addresses` (a backend's own gateway, say)."""
    addresses = [*host_addresses(), *extra_addresses]
    return list(dict.fromkeys([*PROHIBITED, *(f"{address}/32" for address in addresses)]))
