"""Docker, network = true (issue 19): the local backend's guarantees. Each session gets a network
of its own (never the default bridge) with inter-container traffic off, no IPv6, and prohibit
routes for the host and every range `blocked_routes` lists. Only loopback servers this test
starts are contacted; no connection is opened to any private address, the Docker bridges' and
the containers' included: routes are read from /proc/net/route and looked up, nothing is sent.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from coderoom.errors import SandboxFailed
from coderoom.sandboxes import Limits, SandboxSpec, get_backend
from coderoom.sandboxes.blocked_routes import PROHIBITED, prohibited_targets
from coderoom.sandboxes.session import open_session

from .loopback import CONNECT, RTF_REJECT, accepted_nothing, host_loopback_servers, prohibited, route_table

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine")]

NETWORK_ON = Limits(network=True, timeout=20)


@pytest.fixture
async def two_boxes() -> AsyncIterator[list[Any]]:
    backend = get_backend("docker")
    spec = SandboxSpec(backend="docker", limits=NETWORK_ON)
    boxes = list(await asyncio.gather(backend.start(spec), backend.start(spec)))
    try:
        yield boxes
    finally:
        await asyncio.gather(*(box.close() for box in boxes))


def _attachment(client: Any, container_id: str) -> tuple[str, dict[str, Any]]:
    networks = client.api.inspect_container(container_id)["NetworkSettings"]["Networks"]
    assert len(networks) == 1, networks
    return next(iter(networks.items()))


def _network_gone(client: Any, name: str) -> bool:
    import docker.errors

    try:
        client.networks.get(name)
    except docker.errors.NotFound:
        return True
    return False


async def test_each_session_is_on_a_network_of_its_own_with_icc_off(two_boxes: list[Any], client: Any) -> None:
    attached = [_attachment(client, box.container_id) for box in two_boxes]
    names = [name for name, _ in attached]
    assert len(set(names)) == 2 and "bridge" not in names
    for name in names:
        network = client.networks.get(name).attrs
        assert name.startswith("coderoom-net-")
        assert network["Options"]["com.docker.network.bridge.enable_icc"] == "false"
        assert network["Labels"]["coderoom.sandbox"] == "1"
        assert not network["EnableIPv6"]
    members = [set(client.api.inspect_network(name)["Containers"]) for name in names]
    assert members == [{box.container_id} for box in two_boxes]


async def test_neither_session_can_address_the_host_the_other_or_a_private_range(
    two_boxes: list[Any], client: Any
) -> None:
    attached = [_attachment(client, box.container_id) for box in two_boxes]
    for box, (_, own), (_, other) in zip(two_boxes, attached, attached[::-1]):
        routes = await box.exec(["cat", "/proc/net/route"])
        ipv6 = await box.exec(["cat", "/proc/net/if_inet6", "/proc/sys/net/ipv6/conf/all/disable_ipv6"])
        table = route_table(routes.stdout)
        rejected = {str(network) for network, flags in table if flags & RTF_REJECT}
        assert set(prohibited_targets(own["Gateway"])) <= rejected
        assert set(PROHIBITED) <= rejected
        # route lookups, nothing sent: the host (its bridge here, docker0, its other addresses),
        # the other session's container and gateway, cloud metadata, CGNAT, the private ranges
        for address in (own["Gateway"], other["IPAddress"], other["Gateway"], "172.17.0.1", "169.254.169.254",
                        "100.64.0.1", "10.1.2.3", "192.168.1.1"):  # fmt: skip
            assert prohibited(table, address), address
        assert not prohibited(table, "1.1.1.1")  # the internet stays routed
        assert ipv6.stdout == b"1\n", "IPv6 must be off: no address, no route"


async def test_the_host_loopback_is_unreachable_with_network_on() -> None:
    with host_loopback_servers() as servers:
        args = [str(x) for address, port, _ in servers for x in (address, port)]
        async with open_session(SandboxSpec(backend="docker", limits=NETWORK_ON)) as session:
            tried = await session.exec("python3", "-c", CONNECT, *args, shell=False)
            routes = await session.exec("cat /proc/net/route")  # the SDK adapter's path sets them too
        assert all(accepted_nothing(server) for _, _, server in servers)
    assert set(PROHIBITED) <= {str(net) for net, flags in route_table(routes.stdout) if flags & RTF_REJECT}
    assert b"CONNECTED" not in tried.stdout
    assert tried.stdout.count(b"\n") == len(servers), tried.stderr


_DELETE_ROUTES = "RTM_NEWROUTE = 25"  # RTM_DELROUTE: the helper's own request, as a removal


async def test_sandbox_code_cannot_change_its_routes(two_boxes: list[Any]) -> None:
    from coderoom.sandboxes.docker.network import ROUTES_SOURCE

    box = two_boxes[0]
    before = await box.exec(["cat", "/proc/net/route"])
    removal = ROUTES_SOURCE.replace("RTM_NEWROUTE = 24", _DELETE_ROUTES)
    for source in (ROUTES_SOURCE, removal):
        tried = await box.exec(["python3", "-I", "-S", "-c", source, json.dumps(["10.0.0.0/8", "1.0.0.0/8"])])
        assert tried.exit_code == 1 and b"errno 1\n" in tried.stderr, tried.stderr  # EPERM
    after = await box.exec(["cat", "/proc/net/route"])
    assert after.stdout == before.stdout


async def test_no_command_runs_when_the_routes_cannot_be_set(monkeypatch: pytest.MonkeyPatch, client: Any) -> None:
    from coderoom.sandboxes.docker import network

    monkeypatch.setattr(network, "ROUTES_SOURCE", "import sys; sys.stderr.write('refused'); sys.exit(1)")
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=NETWORK_ON))
    try:
        name, _ = _attachment(client, box.container_id)
        with pytest.raises(SandboxFailed, match="routes could not be set: refused"):
            await box.exec(["true"])
    finally:
        await box.close()
    assert _network_gone(client, name)


async def test_close_removes_the_session_network(client: Any) -> None:
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=NETWORK_ON))
    name, _ = _attachment(client, box.container_id)
    assert (await box.exec(["true"])).ok
    await box.close()
    assert _network_gone(client, name)


_LEAVES_A_NETWORK = """
import asyncio
from coderoom.sandboxes import Limits
from coderoom.sandboxes.docker.image import docker_client
from coderoom.sandboxes.docker.session import CoderoomDockerClient
async def main():
    client = CoderoomDockerClient(docker_client(), limits=Limits(network=True), image="coderoom-sandbox:latest")
    container = await client._create_container("coderoom-sandbox:latest")
    print(container.attrs["HostConfig"]["NetworkMode"], container.id, flush=True)
asyncio.run(main())
"""


def test_prune_removes_a_dead_owners_network(client: Any) -> None:
    """A host gone before it started its container leaves the container and its network."""
    from coderoom.sandboxes.docker import prune

    made = subprocess.run([sys.executable, "-c", _LEAVES_A_NETWORK], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    name, container_id = made.stdout.split()
    try:
        assert name.startswith("coderoom-net-") and not _network_gone(client, name)
        prune(client)
        assert _network_gone(client, name)
    finally:
        if not _network_gone(client, name):
            client.api.remove_container(container_id, force=True)
            client.api.remove_network(name)


async def test_a_session_network_is_reused_only_when_it_is_that_sessions(client: Any) -> None:
    """A resume whose container is gone makes a new one for the same session: its network is
    reused; a network of that name that is not the session's own is refused."""
    from coderoom.sandboxes.docker.labels import LABEL, SESSION_LABEL
    from coderoom.sandboxes.docker.network import create_network, network_name, remove_network

    session = "d0c" + "0" * 29
    name = network_name(session)
    labels = {LABEL: "1", SESSION_LABEL: session}
    try:
        create_network(client, name, labels)
        create_network(client, name, labels)  # again: reused
        with pytest.raises(SandboxFailed, match="is not this session's"):
            create_network(client, name, {LABEL: "1", SESSION_LABEL: "f" * 32})
    finally:
        remove_network(client, name)
    client.networks.create(name, labels=labels)  # the default options: icc on
    try:
        with pytest.raises(SandboxFailed, match="is not this session's"):
            create_network(client, name, labels)
    finally:
        remove_network(client, name)


async def test_resume_with_network_on_adopts_the_live_container_and_restores_a_closed_one(
    client: Any, tmp_path: Any
) -> None:
    from agents.sandbox.manifest import Manifest
    from agents.sandbox.snapshot import LocalSnapshotSpec

    spec = SandboxSpec(backend="docker", limits=NETWORK_ON)
    sdk_client, options = get_backend("docker").client(spec)
    session = await sdk_client.create(manifest=Manifest(), snapshot=LocalSnapshotSpec(base_path=tmp_path), options=options)
    await session.start()
    try:
        await session.exec("echo kept > state.txt")
        live = await sdk_client.resume(session.state)  # adopted: its network is the session's own
        await live.start()
        assert (await live.exec("cat state.txt")).stdout == b"kept\n"
        await live.aclose()
        state = live.state
        await sdk_client.delete(live)
    finally:
        await sdk_client.delete(session)
    restored = await sdk_client.resume(state)
    try:
        await restored.start()
        routes = await restored.exec("cat state.txt; cat /proc/net/route")
        name, _ = _attachment(client, restored.state.container_id)
    finally:
        await restored.aclose()
        await sdk_client.delete(restored)
    assert routes.stdout.startswith(b"kept\n")
    rejected = {str(net) for net, flags in route_table(routes.stdout.split(b"\n", 1)[1]) if flags & RTF_REJECT}
    assert set(PROHIBITED) <= rejected
    assert name.startswith("coderoom-net-") and _network_gone(client, name)
