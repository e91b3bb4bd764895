"""Where a server may listen: loopback, unless the user says `--allow-remote`.

Why loopback by default: a coderoom server runs code for whoever has its token; on any other
address that is whoever can reach the machine. The address is checked and bound before the
server does anything slow (preparing a backend), so a refused or taken address is a usage error
(exit 2) found before any session; the socket starts listening only once the server is ready
(`server.serve_app`), so an early client waits in the backlog, never sees a half-started server.
"""

from __future__ import annotations

import ipaddress
import socket

from ..errors import UsageError

LOOPBACK_NAMES = ("localhost",)
LOOPBACK_HOST_HEADERS = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, allow_remote: bool) -> None:
    """The loopback rule, in the one text both servers give."""
    if not is_loopback(host) and not allow_remote:
        raise UsageError(
            f"--host {host} is not a loopback address: add --allow-remote to listen there "
            "(the token is still required, and anyone who can reach it and has the token can run code)"
        )


def bind(host: str, port: int, allow_remote: bool) -> socket.socket:
    """A socket bound to `host`:`port` (0: any free port), not yet listening; UsageError when the
    loopback rule refuses the address or it cannot be bound."""
    check_bind(host, allow_remote)
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: not a port number")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def shown_host(host: str) -> str:
    """`host` as it stands in a URL or a Host header ([::1] for an IPv6 address)."""
    return f"[{host}]" if ":" in host else host


def host_headers(host: str, port: int, extra: tuple[str, ...] | list[str] = ()) -> frozenset[str]:
    """The Host headers a server bound to `host`:`port` answers: the loopback names, the bound
    address unless it is a wildcard, and any public names given, each with the port."""
    names = set(LOOPBACK_HOST_HEADERS) | {name.lower() for name in extra}
    if host not in WILDCARDS:
        names.add(shown_host(host))
    return frozenset(f"{name}:{port}" for name in names)
