"""What the network tests of every backend share: servers on the host's loopback (the only
addresses a test may connect to), an in-sandbox connect probe, and a reader of /proc/net/route
that looks an address up in it the way the kernel would, so an address's route can be checked
without sending anything to it."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
from collections.abc import Iterator

RTF_REJECT = 0x0200  # /proc/net/route's flag for prohibit (and unreachable) routes

CONNECT = """
import socket, sys
for host, port in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        print(host, "CONNECTED")
    except OSError as e:
        print(host, type(e).__name__)
"""


@contextlib.contextmanager
def host_loopback_servers() -> Iterator[list[tuple[str, int, socket.socket]]]:
    """Listening TCP servers on the host's 127.0.0.1 and, if the host has it, ::1."""
    servers = []
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with contextlib.suppress(OSError):
            server = socket.socket(family)
            server.bind((address, 0))
            server.listen()
            server.setblocking(False)
            servers.append((address, server.getsockname()[1], server))
    try:
        yield servers
    finally:
        for _, _, server in servers:
            server.close()


def accepted_nothing(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
    except BlockingIOError:
        return True
    return False


def route_table(proc_net_route: bytes) -> list[tuple[ipaddress.IPv4Network, int]]:
    """(destination, flags) of each IPv4 route in a /proc/net/route (little-endian hex fields)."""
    table = []
    for line in proc_net_route.decode().splitlines()[1:]:
        fields = line.split()
        destination = ipaddress.IPv4Address(struct.pack("<I", int(fields[1], 16)))
        mask = ipaddress.IPv4Address(struct.pack("<I", int(fields[7], 16)))
        table.append((ipaddress.IPv4Network(f"{destination}/{mask}"), int(fields[3], 16)))
    return table


def prohibited(table: list[tuple[ipaddress.IPv4Network, int]], address: str) -> bool:
    """Whether the longest-prefix route for `address` rejects it (a route lookup, nothing sent)."""
    ip = ipaddress.IPv4Address(address)
    matches = [(network.prefixlen, flags) for network, flags in table if ip in network]
    return bool(matches) and bool(max(matches)[1] & RTF_REJECT)
