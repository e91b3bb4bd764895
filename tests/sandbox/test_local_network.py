"""Local backend, network = true (issue 10, class 10): a network namespace of its own with
outbound internet only, never the host's. Only loopback servers this test starts are contacted
(from inside the sandbox, where 127.0.0.1 and ::1 are its own); no connection is opened to any
private or public address, slirp4netns's virtual 10.0.2.x included: the prohibit routes for
those ranges are read, not tried."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.errors import SandboxUnavailable
from coderoom.sandboxes import Limits, SandboxSpec, get_backend
from coderoom.sandboxes.blocked_routes import prohibited_targets
from coderoom.sandboxes.local import network
from coderoom.sandboxes.session import open_session

from .loopback import CONNECT, RTF_REJECT, accepted_nothing, host_loopback_servers, route_table


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")
    if network.unavailable_reason():
        pytest.skip(network.unavailable_reason())


def interfaces(proc_net_dev: bytes) -> list[str]:
    return sorted(line.split(":")[0].strip() for line in proc_net_dev.decode().splitlines()[2:])


async def test_network_on_is_a_namespace_of_its_own_without_the_host_loopback() -> None:
    with host_loopback_servers() as servers:
        # loopback only: no connection to slirp's 10.0.2.2 (its alias of the host loopback) or
        # any other 10.x address, not even a virtual one; the routes below are read, not used
        targets = [(address, port) for address, port, _ in servers]
        args = [str(x) for target in targets for x in target]
        async with open_session(SandboxSpec(backend="local", limits=Limits(network=True))) as session:
            devices = await session.exec("cat /proc/net/dev")
            routes = await session.exec("cat /proc/net/route")
            tried = await session.exec("python3", "-c", CONNECT, *args, shell=False)
        assert all(accepted_nothing(server) for _, _, server in servers)
    assert interfaces(devices.stdout) == ["lo", "tap0"]
    assert b"CONNECTED" not in tried.stdout
    assert tried.stdout.count(b"\n") == len(targets), tried.stderr
    # prohibit routes for the private and link-local ranges (read, nothing sent): 169.254.0.0/16
    # and 10.0.0.0/8, as /proc/net/route writes them (little-endian hex)
    prohibited = {line.split()[1] for line in routes.stdout.decode().splitlines()[1:] if line.split()[3] == "0201"}
    assert {"0000FEA9", "0000000A", "000010AC", "0000A8C0"} <= prohibited
    # the one list both backends prohibit (blocked_routes), each entry exactly
    rejected = {str(net) for net, flags in route_table(routes.stdout) if flags & RTF_REJECT}
    assert set(prohibited_targets()) <= rejected


async def test_network_off_has_only_loopback() -> None:
    async with open_session(SandboxSpec(backend="local")) as session:
        devices = await session.exec("cat /proc/net/dev")
    assert interfaces(devices.stdout) == ["lo"]


def test_without_slirp4netns_network_on_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for tool in ("nsenter", "ip"):
        found = shutil.which(tool)
        assert found
        (tmp_path / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(tmp_path))
    spec = SandboxSpec(backend="local", limits=Limits(network=True))
    backend = get_backend("local")
    assert "slirp4netns" in (backend.unavailable_reason(spec) or "")
    with pytest.raises(SandboxUnavailable, match="needs slirp4netns"):
        backend.client(spec)
