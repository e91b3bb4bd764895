"""kill -9 of the host process of an allowlisted local sandbox: its proxy dies with it (it runs
in that process), the sandbox and its forwarder die with it (--die-with-parent), and nothing
left in the session folder trips a later start; `sandbox prune` removes the folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from backends import require_backend

from .hostside import host_processes_with

FORWARDER = "/opt/coderoom/egress/proxy.sock"  # in the forwarder's command line, inside the sandbox
HARNESS = """
import asyncio, sys
from coderoom.egress.policy import parse_policy
from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session

async def main():
    port = int(sys.argv[1])
    policy = parse_policy({"allow": [f"api.test:{port}"], "resolve": {"api.test": "127.0.0.1"}}, source="harness")
    async with open_session(SandboxSpec(backend="local", limits=Limits(egress=policy))) as s:
        fetched = await s.exec("python3", "-c", f"import urllib.request as u; print(u.urlopen('http://api.test:{port}/').status)", shell=False)
        print(fetched.stdout.decode().strip(), flush=True)
        if sys.argv[2] == "hold":
            await asyncio.sleep(1000)

asyncio.run(main())
"""


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


def wait_until(condition, seconds: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow
def test_kill_9_leaves_no_proxy_or_forwarder_and_nothing_a_restart_trips_on(harness_tmpdir: Path) -> None:
    from egress.upstreams import http_upstream

    env = {**os.environ, "TMPDIR": str(harness_tmpdir)}
    with http_upstream() as seen:
        host = subprocess.Popen(
            [sys.executable, "-c", HARNESS, str(seen.port), "hold"], stdout=subprocess.PIPE, text=True, env=env
        )
        try:
            assert host.stdout is not None and host.stdout.readline() == "200\n"
            assert host_processes_with(FORWARDER)
        finally:
            host.send_signal(signal.SIGKILL)
            host.wait()
        assert wait_until(lambda: not host_processes_with(FORWARDER)), "the forwarder outlived its host"
        left = list(harness_tmpdir.glob("coderoom-local-*/egress/proxy.sock"))
        assert left, "the killed proxy's socket is the case this test is about"
        again = subprocess.run(
            [sys.executable, "-c", HARNESS, str(seen.port), "once"], capture_output=True, text=True, env=env, timeout=120
        )
        assert again.stdout == "200\n", again.stderr
        pruned = subprocess.run(
            [sys.executable, "-m", "coderoom", "sandbox", "prune"], capture_output=True, text=True, env=env, timeout=120
        )
        assert pruned.returncode == 0, pruned.stderr
    assert list(harness_tmpdir.glob("coderoom-local-*")) == []
