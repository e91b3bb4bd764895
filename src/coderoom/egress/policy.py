"""What a sandbox with an allowlist may reach: the hosts, the names the user resolved, the secrets.

A `Policy` is data the user wrote (a job's `[sandbox.network]` table, `--allow-host`,
`--resolve`), checked here once, so the proxy (`proxy`) only ever asks it questions:
`rule_for(host, port)`, `address_for(host)`, `secret_for(host)`. Everything that reaches these
questions from the sandbox side is hostile and goes through `host_of` first, which refuses
anything that is not a plain DNS name or a literal IP address (and recognises every spelling of
an IPv4 literal the C library accepts: 2130706433, 0x7f000001, 0177.0.0.1, 127.1), so a numeric
form can never pass as a name.

`refused_address` says why an address must not be reached unless the user named it through
`resolve` (or listed the literal): loopback, private, shared, link-local (cloud metadata),
multicast, unspecified and reserved ranges, IPv4-mapped and 6to4 IPv6 forms of them included.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping

from ..errors import UsageError
from .rules import Policy, Rule, Secret

MAX_RULES = 256
MAX_HOST_CHARS = 253
_SHOWN_CHARS = 60
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Headers the proxy owns: a secret may not name them (they frame the request or name the host).
_FRAMING_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer"}
# Beyond `is_global`: well-known ranges the ipaddress module counts as global on some versions.
_EXTRA_REFUSED = [ipaddress.ip_network(n) for n in ("100.64.0.0/10", "192.0.0.0/24", "64:ff9b:1::/48")]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def literal_ip(host: str) -> IPAddress | None:
    """The address `host` spells, in any form (dotted, decimal, octal, hex, short IPv4; an IPv6
    literal with or without brackets), or None when it is a name."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if text and all(c in "0123456789abcdefABCDEFxX." for c in text):
        try:  # what inet_aton (and so curl, wget, Python's socket) takes as IPv4
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def host_of(text: str) -> str:
    """`text` as a host the policy can be asked about: a lowercase DNS name without a trailing
    dot, or an IP literal in its canonical form ("[::1]" for IPv6). ValueError otherwise."""
    if not isinstance(text, str) or not text or len(text) > MAX_HOST_CHARS + 2:
        raise ValueError(f"{_shown(text)} is not a host name")
    address = literal_ip(text)
    if address is not None:
        return f"[{address}]" if address.version == 6 else str(address)
    name = text.lower()
    name = name[:-1] if name.endswith(".") else name
    labels = name.split(".")
    if len(name) > MAX_HOST_CHARS or not all(_LABEL.match(label) for label in labels):
        raise ValueError(f"{_shown(text)} is not a host name (letters, digits, '-' and '.'; write IDN names in punycode)")
    if all(label.isdigit() for label in labels):
        raise ValueError(f"{_shown(text)} is not a host name")
    return name


def refused_address(address: IPAddress) -> str | None:
    """Why `address` may not be reached unless the user named it, or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return refused_address(address.ipv4_mapped)
        embedded = address.sixtofour  # 2002:V4ADDR::/48, which a 6to4 tunnel delivers to V4ADDR
        if embedded is not None and refused_address(embedded) is not None:
            return f"a 6to4 address of {embedded}, {refused_address(embedded)}"
        if address.is_site_local:
            return "a site-local address"
    for kind in ("unspecified", "loopback", "link_local", "multicast", "private", "reserved"):
        if getattr(address, f"is_{kind}"):
            kind = kind.replace("_", "-")
            return f"a {kind} address" + (" (cloud metadata lives here)" if kind == "link-local" else "")
    if any(address in network for network in _EXTRA_REFUSED) or not address.is_global:
        return "not a global address"
    return None


def parse_rule(text: object) -> Rule:
    """`host`, `host:port`, `*.suffix[:port]`, `1.2.3.4[:port]` or `[::1][:port]`; ValueError."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{_shown(text)} is not HOST or HOST:PORT")
    text = text.strip()
    host, port = split_port(text)
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    elif "*" in host:
        raise ValueError(f"{_shown(text)}: a wildcard is only '*.' at the start, e.g. '*.example.org'")
    name = host_of(host)
    if wildcard and (literal_ip(name) is not None or "." not in name):
        raise ValueError(f"{_shown(text)}: a wildcard needs a domain of two labels or more after '*.'")
    return Rule(name, port, wildcard)


def split_port(text: str) -> tuple[str, int | None]:
    """`host` and its port (None when not given) of `host`, `host:port` or `[v6]:port`; ValueError."""
    if text.startswith("["):
        host, _, rest = text.partition("]")
        host += "]"
        if rest and not rest.startswith(":"):
            raise ValueError(f"{_shown(text)} is not HOST or HOST:PORT")
        port_text = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None  # an IPv6 literal without brackets has no port
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{_shown(text)}: the port must be a number from 1 to 65535")
    return host, int(port_text)


def parse_resolve_flag(item: str) -> tuple[str, str]:
    """`HOST=ADDRESS` of `--resolve`; ValueError."""
    name, sep, address = item.partition("=")
    if not sep:
        raise ValueError(f"{_shown(item)}: expected HOST=ADDRESS, e.g. --resolve api.test=127.0.0.1")
    return name.strip(), address.strip()


def _resolve_entry(name: object, address: object) -> tuple[str, str]:
    if not isinstance(name, str) or literal_ip(name) is not None:
        raise ValueError(f"{_shown(name)}: resolve maps a host name to an address")
    ip = literal_ip(address) if isinstance(address, str) else None
    if ip is None or not isinstance(address, str) or (address != str(ip) and address != f"[{ip}]"):
        raise ValueError(f"{name} = {_shown(address)}: not an IP address in its usual form (127.0.0.1, ::1)")
    return host_of(name), str(ip)


def _secret(entry: object, rules: tuple[Rule, ...]) -> Secret:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{_shown(entry)}: a secret is a table with host, header and env")
    unknown = set(entry) - {"host", "header", "env", "format", "plain_http"}
    if unknown:
        raise ValueError(f"unknown key {_shown(sorted(map(str, unknown))[0])}; a secret has host, header, env, format, plain_http")
    host, header, env, fmt, plain = (entry.get(key) for key in ("host", "header", "env", "format", "plain_http"))
    if not isinstance(host, str):
        raise ValueError("a secret needs host = \"NAME\"")
    name = host_of(host)
    if not isinstance(header, str) or not _HEADER_NAME.match(header) or header.lower() in _FRAMING_HEADERS:
        raise ValueError(f"{name}: header {_shown(header)} is not a header name the proxy may set")
    if not isinstance(env, str) or not _ENV_NAME.match(env):
        raise ValueError(f"{name}: env {_shown(env)} is not an environment variable name")
    fmt = "{}" if fmt is None else fmt
    if not isinstance(fmt, str) or fmt.count("{}") != 1 or len(fmt) > 200 or any(c in fmt for c in "\r\n\0"):
        raise ValueError(f"{name}: format must hold '{{}}' once, e.g. 'Bearer {{}}'")
    if not any(rule.matches(name, port) for rule in rules for port in rule.ports()):
        raise ValueError(f"{name}: a secret's host must be in allow")
    if plain is not None and not isinstance(plain, bool):
        raise ValueError(f"{name}: plain_http is true or false")
    return Secret(name, header, env, fmt, plain_http=bool(plain))


def parse_policy(table: object, *, source: str) -> Policy:
    """A `[sandbox.network]` table (allow, resolve, secrets) as a `Policy`: a UsageError that
    starts with `source`, one line per problem."""
    if isinstance(table, Policy):
        return table
    if not isinstance(table, Mapping):
        raise UsageError(f"{source}: expected a table with allow, resolve and secrets, not {_shown(table)}")
    problems: list[str] = []
    unknown = [key for key in table if key not in ("allow", "resolve", "secrets")]
    for key in unknown:
        problems.append(f"{source} {_shown(key)}: not a network setting; choose one of: allow, resolve, secrets")
    allow = table.get("allow", [])
    resolve = table.get("resolve", {})
    secrets = table.get("secrets", [])
    rules: list[Rule] = []
    if not isinstance(allow, (list, tuple)) or len(allow) > MAX_RULES:
        problems.append(f"{source} allow: expected a list of at most {MAX_RULES} HOST or HOST:PORT")
        allow = []
    for entry in allow:
        try:
            rules.append(parse_rule(entry))
        except ValueError as exc:
            problems.append(f"{source} allow: {exc}")
    mapped: list[tuple[str, str]] = []
    if not isinstance(resolve, Mapping) or len(resolve) > MAX_RULES:
        problems.append(f"{source} resolve: expected a table of HOST = \"ADDRESS\"")
        resolve = {}
    for name, address in resolve.items():
        try:
            mapped.append(_resolve_entry(name, address))
        except ValueError as exc:
            problems.append(f"{source} resolve: {exc}")
    parsed: list[Secret] = []
    if not isinstance(secrets, (list, tuple)) or len(secrets) > MAX_RULES:
        problems.append(f"{source} secrets: expected a list of tables")
        secrets = []
    for entry in secrets:
        try:
            parsed.append(_secret(entry, tuple(rules)))
        except ValueError as exc:
            problems.append(f"{source} secrets: {exc}")
    if not rules and (mapped or parsed) and not problems:
        problems.append(f"{source}: resolve and secrets need at least one host in allow")
    if problems:
        raise UsageError("\n".join(problems))
    return Policy(tuple(rules), tuple(dict(mapped).items()), tuple(parsed))


def policy_from_flags(allow_hosts: Iterable[str], resolves: Iterable[str], *, base: Policy | None) -> Policy | None:
    """`base` (a job's) with `--allow-host` and `--resolve` added; None when there is neither."""
    allow, resolve = list(allow_hosts), list(resolves)
    if not allow and not resolve:
        return base
    table = base.table() if base is not None else {"allow": [], "resolve": {}, "secrets": []}
    problems = []
    for item in resolve:
        try:
            name, address = parse_resolve_flag(item)
        except ValueError as exc:
            problems.append(f"--resolve {exc}")
            continue
        table["resolve"][name] = address  # type: ignore[index]
    if problems:
        raise UsageError("\n".join(problems))
    table["allow"] = [*table["allow"], *allow]  # type: ignore[misc]
    return parse_policy(table, source="--allow-host/--resolve")
