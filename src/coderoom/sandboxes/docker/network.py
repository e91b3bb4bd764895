"""`network = true` on docker: a network of the session's own, with the local backend's routes.

Docker's default bridge is shared: every container on it reaches the others and, through the
bridge's address, every service the host listens on. So a session with network on gets instead:

* a bridge network of its own (`coderoom-net-<session>`, labelled like the container, removed
  at close and by `prune`), with inter-container traffic off (`enable_icc=false`) and no IPv6
  (the container's `disable_ipv6` sysctls: no address, no IPv6 route);
* before its first command, `prohibit` routes in the container's network namespace for
  `blocked_routes.prohibited_targets` (the list the local backend uses) plus the network's
  gateway, which is the host: connect() to any of them fails with EACCES and nothing is sent.
  A helper container (inside/routes.py, the sandbox's own image) joins only that network
  namespace, with CAP_NET_ADMIN alone, adds them and exits; the sandbox has no capability to
  remove them. Nothing is left on the host: the routes go with the container.

What stays reachable is what the local backend's slirp4netns reaches: the public IPv4 internet
through the host's routes (Docker's NAT), and DNS through Docker's resolver at 127.0.0.11, which
forwards to the host's resolvers. No host firewall rule is needed, so a user in the docker group
gets the same guarantee as root. If the routes cannot be added, no command runs.

`docker` is imported by the functions that call the engine: `request` reads `network_name` and
`IPV6_OFF` on the CLI's fast path, which loads no docker-py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import SandboxFailed
from ..blocked_routes import prohibited_targets
from .labels import LABEL, SESSION_LABEL

NETWORK_PREFIX = "coderoom-net-"
ICC_OFF = {"com.docker.network.bridge.enable_icc": "false"}
IPV6_OFF = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
ROUTES_SOURCE = (Path(__file__).with_name("inside") / "routes.py").read_text()
CONFINE_WAIT_S = 30.0
ROLE_LABEL = "coderoom.role"
_ERROR_BYTES = 2000


def network_name(session_hex: str) -> str:
    return f"{NETWORK_PREFIX}{session_hex[:12]}"


def create_network(client: Any, name: str, labels: Mapping[str, str]) -> None:
    """The session's bridge: its own, icc off, IPv4 only, labelled for `prune`. One left by the
    same session (a resume whose container is gone) is reused when it is exactly that: coderoom's
    labels with this session's id, and icc off."""
    import docker.errors

    try:
        client.networks.create(
            name, driver="bridge", options=ICC_OFF, labels=dict(labels), enable_ipv6=False, check_duplicate=True
        )
    except docker.errors.APIError as e:
        if e.status_code != 409:
            raise
        existing = client.api.inspect_network(name)
        theirs = existing.get("Labels") or {}
        same = all(theirs.get(key) == labels.get(key) for key in (LABEL, SESSION_LABEL))
        if not same or (existing.get("Options") or {}) != ICC_OFF or existing.get("EnableIPv6"):
            raise SandboxFailed(f"a docker network named {name} exists and is not this session's") from e


def remove_network(client: Any, name: str) -> bool:
    """Remove a session's network; False when it is still in use (prune retries later)."""
    import docker.errors

    try:
        client.api.remove_network(name)
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError as e:
        if e.status_code in (403, 409):  # active endpoints: a container still attached
            return False
        raise
    return True


def session_network(attrs: Mapping[str, Any]) -> tuple[str, str]:
    """(name, gateway) of the one network a coderoom container with network on is attached to;
    SandboxFailed when it is anything else (the default bridge, several networks)."""
    networks = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    names = list(networks)
    if len(names) != 1 or not names[0].startswith(NETWORK_PREFIX):
        raise SandboxFailed(f"the sandbox is not on a network of its own (networks: {names})")
    gateway = str(networks[names[0]].get("Gateway") or "")
    if not gateway:
        raise SandboxFailed(f"the sandbox's network {names[0]} has no IPv4 gateway")
    return names[0], gateway


def confine(client: Any, container_id: str, *, python: Sequence[str]) -> str:
    """Add the prohibit routes to the running container's network namespace (module docstring);
    the network's name. SandboxFailed, with the helper's reason, when they could not be added."""
    import docker.errors

    attrs = client.api.inspect_container(container_id)
    name, gateway = session_network(attrs)
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    targets = prohibited_targets(gateway)
    helper = client.containers.create(
        image=attrs["Image"],
        entrypoint=[*python, "-I", "-S", "-c", ROUTES_SOURCE],
        command=[json.dumps(targets)],
        user="0:0",
        network_mode=f"container:{container_id}",
        cap_drop=["ALL"],
        cap_add=["NET_ADMIN"],
        security_opt=["no-new-privileges"],
        read_only=True,
        environment={},
        labels={**labels, ROLE_LABEL: "network-routes"},
    )
    try:
        helper.start()
        try:
            code = int(helper.wait(timeout=CONFINE_WAIT_S).get("StatusCode", 1))
        except Exception as e:  # the read timed out (requests' ReadTimeout / ConnectionError)
            raise SandboxFailed(f"the sandbox's network routes were not set within {CONFINE_WAIT_S:g} s") from e
        if code != 0:
            reason = helper.logs(stdout=False, stderr=True)[-_ERROR_BYTES:].decode(errors="replace").strip()
            raise SandboxFailed(f"the sandbox's network routes could not be set: {reason or f'exit {code}'}")
    finally:
        try:
            helper.remove(force=True)
        except docker.errors.NotFound:
            pass
    return name


def prune_networks(client: Any, owner_gone: Any, skipped: list[str] | None = None) -> int:
    """Remove coderoom's networks whose owner is gone and that no container uses; how many. One
    the engine refuses to remove otherwise is added to `skipped` (given a list), or raises."""
    import docker.errors

    removed = 0
    for network in client.networks.list(filters={"label": f"{LABEL}=1"}):
        if not owner_gone(network.attrs.get("Labels") or {}):
            continue
        try:
            removed += remove_network(client, network.name)
        except docker.errors.APIError as e:
            if skipped is None:
                raise
            skipped.append(f"network {network.name} left in place: {e.explanation or e}")
    return removed
