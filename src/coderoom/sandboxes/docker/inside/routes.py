"""Add `prohibit` routes to the network namespace this process runs in (Docker's network of one
sandbox container): connect() to a prohibited address fails with EACCES and nothing is sent.

    python3 -I -S routes.py '["10.0.0.0/8", "172.18.0.1/32", ...]'

Runs in a short-lived helper container that joins the sandbox's network namespace with
CAP_NET_ADMIN (the sandbox itself has none, so it cannot remove them) and nothing else of it.
Talks rtnetlink directly (RTM_NEWROUTE, NLM_F_REPLACE: running it twice is harmless), since
images need not have `ip`. Standard library only; exit 0 when the kernel acknowledged every
route, else 1 naming the first one refused.
"""

import json
import socket
import struct
import sys

RTM_NEWROUTE = 24
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_REPLACE, NLM_F_CREATE = 0x1, 0x4, 0x100, 0x400
RT_TABLE_MAIN, RTPROT_STATIC, RT_SCOPE_UNIVERSE, RTN_PROHIBIT = 254, 4, 0, 8
RTA_DST = 1


def route_message(seq, cidr):
    """An RTM_NEWROUTE request for `prohibit CIDR` in the main table."""
    address, _, bits = cidr.partition("/")
    packed = socket.inet_aton(address)
    attribute = struct.pack("HH", 4 + len(packed), RTA_DST) + packed
    body = struct.pack("BBBBBBBBI", socket.AF_INET, int(bits), 0, 0, RT_TABLE_MAIN, RTPROT_STATIC,
                       RT_SCOPE_UNIVERSE, RTN_PROHIBIT, 0) + attribute
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE | NLM_F_CREATE
    return struct.pack("IHHII", 16 + len(body), RTM_NEWROUTE, flags, seq, 0) + body


def acknowledged(sock, seq):
    """0 when the kernel acknowledged request `seq`, else its (positive) errno."""
    while True:
        data = sock.recv(65536)
        offset = 0
        while offset + 16 <= len(data):
            length, kind, _, got, _ = struct.unpack_from("IHHII", data, offset)
            if kind == NLMSG_ERROR and got == seq:
                return -struct.unpack_from("i", data, offset + 16)[0]
            offset += max(16, (length + 3) & ~3)


def main(targets):
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(10)
        for seq, cidr in enumerate(targets, start=1):
            sock.send(route_message(seq, cidr))
            error = acknowledged(sock, seq)
            if error:
                sys.stderr.write("prohibit %s: errno %d\n" % (cidr, error))
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
