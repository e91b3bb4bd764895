"""Egress pass (2026-12-06), from inside real local sandboxes: what code in an allowlisted
sandbox can make the host hold. Upstreams on 127.0.0.1 only, reached through `resolve` names."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from backends import require_backend
from egress.upstreams import http_upstream

from coderoom.egress.policy import parse_policy
from coderoom.egress.proxy import MAX_OPEN
from coderoom.sandboxes import Limits
from coderoom.service.session import Session

HOLD = r"""
import os, socket, sys, time
port, children, most = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
for _ in range(children):  # each child fills its own open-files limit with connections to the proxy
    if os.fork() == 0:
        held = []
        try:
            while len(held) < 480:
                s = socket.socket(socket.AF_UNIX)
                s.connect("/opt/coderoom/egress/proxy.sock")
                held.append(s)
        except OSError:
            pass
        print("held", len(held), flush=True)
        open(f"held-{os.getpid()}", "w").close()
        deadline = time.monotonic() + most  # held until the host has counted, at most this long
        while not os.path.exists("counted") and time.monotonic() < deadline:
            time.sleep(0.05)
        print("released" if os.path.exists("counted") else "expired", flush=True)
        os._exit(0)
while len([name for name in os.listdir(".") if name.startswith("held-")]) < children:
    time.sleep(0.1)
open("ready", "w").close()
for _ in range(children):
    os.wait()
"""


async def _exists(session: Session, path: str) -> bool:
    try:
        await session.read_file(path)
    except Exception:  # not there yet
        return False
    return True


@pytest.mark.slow
async def test_a_sandbox_cannot_make_the_host_hold_more_than_the_open_cap_of_proxy_connections(tmp_path: Path) -> None:
    require_backend("local")
    with http_upstream() as seen:
        policy = parse_policy({"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}}, source="test")
        session = await Session.open(model="offline", sandbox="local", limits=Limits(egress=policy), runs_dir=tmp_path)
        try:
            await session.write_file("hold.py", HOLD.encode())
            baseline = len(os.listdir("/proc/self/fd"))
            # each child holds its connections until the host has counted its own descriptors
            # ("counted"), at most 60 s: the count is taken while all of them hold, however busy
            # the machine (a fixed hold could end first, and a count of nothing held passes)
            holding = asyncio.ensure_future(session.exec(f"python3 hold.py {seen.port} 4 60", timeout=110))
            while not holding.done() and not await _exists(session, "ready"):
                await asyncio.sleep(0.2)  # until every child holds its connections
            await asyncio.sleep(1)
            held = max([len(os.listdir("/proc/self/fd")) for _ in range(5) if not await asyncio.sleep(0.2)])
            await session.write_file("counted", b"")
            result = await holding
            after = await session.exec(
                f"python3 -c \"import urllib.request as u; print(u.urlopen('http://api.test:{seen.port}/', timeout=20).status)\"",
                timeout=110,
            )  # fmt: skip
        finally:
            await session.close()
    held_lines = [line for line in result.stdout.splitlines() if line.startswith("held ")]
    assert len(held_lines) == 4 and sum(int(line.split()[1]) for line in held_lines) > 4 * MAX_OPEN
    assert result.stdout.count("released") == 4, result.stdout  # the count above was taken while every child held
    assert held - baseline <= MAX_OPEN + 32  # not one descriptor per sandbox connection (was ~1900 for 30 s)
    assert after.stdout.strip() == "200", after.stderr  # the cap frees as the connections end
