"""An allowlisted Docker sandbox's own parts (the behaviour both backends share is specified in
tests/egress/test_sandbox_egress.py): the container has no network, the folder of the proxy's
socket is the session's own, reachable by the sandbox's uid and read-only inside, the forwarder
that init.py keeps comes back after whatever ended it, the proxy and its folder end with the
session, and a kill -9 of the host leaves nothing that `sandbox prune` does not remove."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from backends import require_backend

from coderoom.egress.policy import parse_policy
from coderoom.sandboxes import Limits, SandboxSpec, get_backend
from coderoom.sandboxes.docker import egress
from coderoom.sandboxes.docker.request import SANDBOX_UID, create_request
from coderoom.sandboxes.leases import LEASE_FILE, LEASELESS_GRACE_S
from coderoom.sandboxes import records

FETCH = "import sys, urllib.request as u; print(u.urlopen(f'http://api.test:{sys.argv[1]}/ok', timeout=20).status)"


@pytest.fixture(autouse=True)
def _engine() -> None:
    require_backend("docker")


@pytest.fixture
def upstream() -> Any:
    from egress.upstreams import http_upstream

    with http_upstream() as seen:
        yield seen


def allowlist(port: int) -> Limits:
    policy = parse_policy({"allow": [f"api.test:{port}"], "resolve": {"api.test": "127.0.0.1"}}, source="test")
    return Limits(timeout=60, egress=policy)


@pytest.fixture
async def sandbox(upstream: Any) -> AsyncIterator[Any]:
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=allowlist(upstream.port)))
    try:
        yield box
    finally:
        await box.close()


async def fetch(box: Any, port: int) -> str:
    result = await box.exec(["python3", "-c", FETCH, str(port)])
    return result.stdout.decode().strip() or result.stderr.decode()[-300:]


def test_the_create_request_binds_the_socket_folder_read_only_and_sets_no_network(tmp_path: Path) -> None:
    _, body = create_request(allowlist(8080), image="any", program=b"", egress_dir=tmp_path)
    host = body["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert {"Target": egress.INSIDE_DIR, "Source": str(tmp_path), "Type": "bind", "ReadOnly": True} in host["Mounts"]
    assert f"--egress={egress.INSIDE_SOCKET}:3128" in body["Cmd"]
    assert "HTTPS_PROXY=http://127.0.0.1:3128" in body["Env"]
    with pytest.raises(ValueError, match="folder of its proxy's socket"):
        create_request(allowlist(8080), image="any", program=b"")  # an allowlist needs its folder
    with pytest.raises(ValueError, match="folder of its proxy's socket"):
        create_request(Limits(), image="any", program=b"", egress_dir=tmp_path)  # and only it


@pytest.mark.slow
async def test_the_socket_folder_is_the_sessions_own_reachable_by_the_sandbox_uid_and_gone_at_close(
    upstream: Any,
) -> None:
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=allowlist(upstream.port)))
    try:
        assert await fetch(box, upstream.port) == "200"
        folder = box._egress_dir
        st = os.stat(folder)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o710 if os.geteuid() == 0 else 0o700)
        if os.geteuid() == 0:
            assert st.st_gid == SANDBOX_UID  # the sandbox's uid may pass through, never list or write
        assert stat.S_ISSOCK(os.stat(folder / egress.SOCKET_NAME).st_mode)
        inside = await box.exec(
            ["sh", "-c", f"ls {egress.INSIDE_DIR}; touch {egress.INSIDE_DIR}/x; ip -o link 2>/dev/null; cat /proc/net/dev"]
        )
        assert b"Permission denied" in inside.stderr or b"Read-only" in inside.stderr
        assert not (folder / "x").exists()
        interfaces = [line.split(b":")[0].strip() for line in inside.stdout.splitlines()[2:]]
        assert interfaces == [b"lo"]  # network none: the proxy is the only way out
    finally:
        await box.close()
    assert not folder.exists()


@pytest.mark.slow
async def test_the_forwarder_comes_back_after_sandbox_code_kills_it_and_after_an_archive(
    sandbox: Any, upstream: Any
) -> None:
    assert await fetch(sandbox, upstream.port) == "200"
    assert await fetch(sandbox, upstream.port) == "200"  # the end of a command spares it
    await sandbox.exec(["sh", "-c", "kill -9 -1"])  # every process the sandbox's uid may signal
    assert await fetch(sandbox, upstream.port) == "200"
    (await sandbox.archive()).close()  # kills every process but init.py first
    assert await fetch(sandbox, upstream.port) == "200"
    assert len(upstream.requests) == 4


async def test_the_forwarder_comes_back_after_sandbox_code_stops_it(sandbox: Any, upstream: Any) -> None:
    """D-F11: a stopped forwarder held every later fetch in its listen queue until the session ended."""
    assert await fetch(sandbox, upstream.port) == "200"
    await sandbox.exec(["sh", "-c", "kill -TSTP -1; kill -STOP -1"])  # every process the sandbox's uid may signal
    assert await fetch(sandbox, upstream.port) == "200"
    assert len(upstream.requests) == 2


HARNESS = """
import asyncio, sys
from coderoom.egress.policy import parse_policy
from coderoom.sandboxes import Limits, SandboxSpec, get_backend

async def main():
    port = int(sys.argv[1])
    policy = parse_policy({"allow": [f"api.test:{port}"], "resolve": {"api.test": "127.0.0.1"}}, source="harness")
    box = await get_backend("docker").start(SandboxSpec(backend="docker", limits=Limits(egress=policy)))
    try:
        fetched = await box.exec(["python3", "-c", f"import urllib.request as u; print(u.urlopen('http://api.test:{port}/').status)"])
        print(fetched.stdout.decode().strip(), box.container_id, flush=True)
        if sys.argv[2] == "hold":
            await asyncio.sleep(1000)
    finally:
        await box.close()

asyncio.run(main())
"""


def wait_until(condition: Callable[[], bool], seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow
def test_kill_9_of_the_host_leaves_nothing_a_restart_trips_on_and_prune_removes_the_folder(
    harness_tmpdir: Path, upstream: Any, client: Any
) -> None:
    env = {**os.environ, "TMPDIR": str(harness_tmpdir)}
    host = subprocess.Popen(
        [sys.executable, "-c", HARNESS, str(upstream.port), "hold"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert host.stdout is not None
        status, container_id = host.stdout.readline().split()
        assert status == "200"
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait()

    def container_gone() -> bool:
        return not client.containers.list(all=True, filters={"id": container_id})

    assert wait_until(container_gone), "the container outlived its host"  # its stdin closed
    left = list(harness_tmpdir.glob(f"{egress.PREFIX}*"))
    assert len(left) == 1, "the killed host's socket folder is the case this test is about"
    again = subprocess.run(
        [sys.executable, "-c", HARNESS, str(upstream.port), "once"], capture_output=True, text=True, env=env, timeout=180
    )
    assert again.stdout.startswith("200 "), again.stderr
    assert list(harness_tmpdir.glob(f"{egress.PREFIX}*")) == left  # the second session's went at its close
    pruned = subprocess.run(
        [sys.executable, "-m", "coderoom", "sandbox", "prune"],
        capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    assert pruned.returncode == 0, pruned.stderr
    assert list(harness_tmpdir.glob(f"{egress.PREFIX}*")) == []


def test_prune_removes_dead_owners_socket_folders_and_keeps_live_ones_and_ones_it_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir reads TMPDIR again
    live = egress.make(SANDBOX_UID)
    dead = egress.make(SANDBOX_UID)
    lease = json.loads((dead / LEASE_FILE).read_text())
    (dead / LEASE_FILE).unlink()
    records.write(dead, LEASE_FILE, json.dumps({**lease, "boot": "a-boot-long-gone"}).encode())
    being_made, crashed = egress.make(SANDBOX_UID), egress.make(SANDBOX_UID)
    for leaseless in (being_made, crashed):  # a crash between mkdtemp and the lease
        (leaseless / LEASE_FILE).unlink()
    old = time.time() - LEASELESS_GRACE_S - 60
    os.utime(crashed, (old, old))
    foreign = tmp_path / f"{egress.PREFIX}foreign"
    foreign.mkdir(mode=0o777)
    foreign.chmod(0o777)  # writable by others: not one we made
    assert egress.prune() == 2
    assert live.exists() and being_made.exists() and foreign.exists()
    assert not dead.exists() and not crashed.exists()
    egress.remove(live)
    assert not live.exists()


@pytest.mark.slow
async def test_resume_adopts_a_live_allowlisted_container_of_its_own_client_only(upstream: Any, tmp_path: Path) -> None:
    from agents.sandbox.manifest import Manifest
    from agents.sandbox.snapshot import LocalSnapshotSpec

    spec = SandboxSpec(backend="docker", limits=allowlist(upstream.port))
    sdk_client, options = get_backend("docker").client(spec)
    session = await sdk_client.create(manifest=Manifest(), snapshot=LocalSnapshotSpec(base_path=tmp_path), options=options)
    await session.start()
    try:
        other_client, _ = get_backend("docker").client(spec)
        with pytest.raises(ValueError, match="egress proxy is not this client's"):
            await other_client.resume(session.state)  # its proxy runs in another client
        live = await sdk_client.resume(session.state)  # adopted, with the folder it was made with
        await live.start()
        fetched = await live.exec(f"python3 -c \"{FETCH}\" {upstream.port}")
        assert fetched.stdout == b"200\n", fetched.stderr
        await live.aclose()
    finally:
        await sdk_client.delete(session)
