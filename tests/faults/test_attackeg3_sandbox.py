"""Egress early-answer pass (2026-12-07) from inside real sandboxes: the program sits behind the
sandbox's forwarder (127.0.0.1:3128), as any sandboxed code does. Upstreams on the host's
127.0.0.1 only, named through `resolve`. See docs/security.md, "Egress early answers and stream
fallback attack pass" (E-R rows)."""

from __future__ import annotations

from pathlib import Path

import pytest

from egress.upstreams import early_answerer, tcp_recorder

from coderoom.egress.policy import parse_policy
from coderoom.record.reader import read_record
from coderoom.sandboxes import Limits
from coderoom.service.session import Session

BUDGET = 1024**2

ATTACK = r"""
import socket, sys
port, other = int(sys.argv[1]), int(sys.argv[2])
upload = f"POST http://api.test:{port}/upload HTTP/1.1\r\nHost: api.test:{port}\r\n"

def answer_of(s):
    got = b""
    while b"not read" not in got and (chunk := s.recv(65536)):
        got += chunk
    return got

# 1. a second request, to another allowed host, pipelined after an early-answered body
with socket.create_connection(("127.0.0.1", 3128), timeout=30) as s:
    second = f"GET http://other.test:{other}/ HTTP/1.1\r\nHost: other.test:{other}\r\n\r\n"
    s.sendall((upload + "Content-Length: 16\r\n\r\n0123456789abcdef" + second).encode())
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    print("pipelined", got.count(b"HTTP/1.1"), got.split(b"\r\n")[0].decode(), flush=True)

# 2. 32 MiB pushed after the early answer, into the linger (the budget is 1 MiB)
pushed = 0
with socket.create_connection(("127.0.0.1", 3128), timeout=30) as s:
    s.sendall((upload + "Content-Length: 100000000\r\n\r\n").encode())
    print("early", answer_of(s).split(b"\r\n")[0].decode(), flush=True)
    try:
        for _ in range(512):
            s.sendall(b"d" * 65536)
            pushed += 65536
    except OSError as exc:
        pass
print("cut_before_32MiB", pushed < 32 * 1024 * 1024 or pushed, flush=True)

# 3. the budget is spent: the next request is refused with its name
with socket.create_connection(("127.0.0.1", 3128), timeout=30) as s:
    s.sendall((upload + "Content-Length: 0\r\n\r\n").encode())
    got = b""
    while chunk := s.recv(65536):
        got += chunk
    print("after", got.split(b"\r\n")[0].decode(), b"egress_bytes" in got, flush=True)
"""


@pytest.mark.slow
async def test_from_a_sandbox_the_linger_neither_forwards_nor_escapes_the_byte_budget(tmp_path: Path, backend: str) -> None:
    """E-R1/E-R5/E-R9 through the forwarder: a request pipelined after an early-answered body goes
    nowhere; what the program pushes after the answer is dropped, counts in egress_bytes and is
    cut there; the next request is refused with the budget's name."""
    with early_answerer() as seen, tcp_recorder() as other:
        table = {
            "allow": [f"api.test:{seen.port}", f"other.test:{other.port}"],
            "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1"},
        }
        limits = Limits(egress=parse_policy(table, source="test"), egress_bytes=BUDGET)
        session = await Session.open(model="offline", sandbox=backend, limits=limits, runs_dir=tmp_path)
        try:
            await session.write_file("attack.py", ATTACK.encode())
            result = await session.exec(f"python3 attack.py {seen.port} {other.port}", timeout=110)
        finally:
            run_dir = await session.close()
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines == {
        "pipelined": "1 HTTP/1.1 413 Content Too Large",
        "early": "HTTP/1.1 413 Content Too Large",
        "cut_before_32MiB": "True",
        "after": "HTTP/1.1 403 Forbidden True",
    }, (result.stdout, result.stderr)
    assert other.raw == [] and len(seen.raw) == 2
    events = [e for e in read_record(run_dir).events if e.type == "egress"]
    assert [(e.method, e.host, e.allowed) for e in events] == [("POST", "api.test", True)] * 2 + [("POST", "", False)]
    assert all(e.bytes_up < 2 * 65536 for e in events)  # neither body went on upstream past the answer
