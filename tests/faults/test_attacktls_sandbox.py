"""TLS interception pass (2026-12-06), from inside real sandboxes on both backends: code in the
sandbox, speaking to the proxy's socket itself, tries to make an intercepted connection carry a
second request, another host, a tunnel, HTTP/2 or a request the server reflects. Upstreams are
HTTPS servers on 127.0.0.1 with a test CA (`CODEROOM_EGRESS_UPSTREAM_CA` on the host), reached
through `resolve` names; the secret is a canary."""

from __future__ import annotations

from pathlib import Path

import pytest
from backends import require_backend
from egress.upstreams import TestCA, http_upstream

from coderoom.egress.policy import parse_policy
from coderoom.egress.session import UPSTREAM_CA_ENV
from coderoom.record.reader import read_record
from coderoom.sandboxes import Limits
from coderoom.service.session import Session

CANARY = "canary-attacktls-2d7f90b4"
SOCKET = {"local": "/opt/coderoom/egress/proxy.sock", "docker": "/run/coderoom-egress/proxy.sock"}

INSIDE = r"""
import os, socket, ssl, sys
sock_path, api, other = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
H = f"api.test:{api}"

def inside_tls(request, alpn=None):
    raw = socket.socket(socket.AF_UNIX); raw.settimeout(30); raw.connect(sock_path)
    raw.sendall(f"CONNECT {H} HTTP/1.1\r\nHost: {H}\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += raw.recv(1)
    context = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if alpn:
        context.set_alpn_protocols(alpn)
    with context.wrap_socket(raw, server_hostname="api.test") as tls:
        tls.sendall(request)
        answer = b""
        try:
            while chunk := tls.recv(65536):
                answer += chunk
        except (ssl.SSLError, OSError):
            pass
    return answer

attempts = {
    "pipelined": f"GET /first HTTP/1.1\r\nHost: {H}\r\n\r\nGET /second HTTP/1.1\r\nHost: other.test:{other}\r\n\r\n".encode(),
    "absolute": f"GET https://other.test:{other}/absolute HTTP/1.1\r\nHost: {H}\r\n\r\n".encode(),
    "connect": f"CONNECT other.test:{other} HTTP/1.1\r\nHost: {H}\r\n\r\n".encode(),
    "trace": f"TRACE /trace HTTP/1.1\r\nHost: {H}\r\n\r\n".encode(),
    "smuggled": f"POST /smuggle HTTP/1.1\r\nHost: {H}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: {H}\r\n\r\n".encode(),
}
for name, request in attempts.items():
    answer = inside_tls(request)
    print(name, answer.split(b"\r\n")[0].decode(), "CANARY" if b"canary-attacktls" in answer else "clean", flush=True)
answer = inside_tls(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", alpn=["h2"])
print("h2", answer.split(b"\r\n")[0].decode(), "CANARY" if b"canary-attacktls" in answer else "clean", flush=True)
"""


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return str(request.param)


@pytest.mark.slow
async def test_an_intercepted_connection_carries_one_request_to_its_host_and_never_hands_the_secret_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    test_ca = TestCA(tmp_path)
    monkeypatch.setenv("ATTACKTLS_TOKEN", CANARY)
    monkeypatch.setenv(UPSTREAM_CA_ENV, str(test_ca.cafile))
    with http_upstream(tls=test_ca.server_context("api.test")) as api, http_upstream(tls=test_ca.server_context("other.test")) as other:
        table = {
            "allow": [f"api.test:{api.port}", f"other.test:{other.port}"],
            "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1"},
            "secrets": [{"host": "api.test", "header": "Authorization", "env": "ATTACKTLS_TOKEN", "format": "Bearer {}"}],
        }
        session = await Session.open(model="offline", sandbox=backend, limits=Limits(egress=parse_policy(table, source="test")), runs_dir=tmp_path / "runs")
        try:
            await session.write_file("inside.py", INSIDE.encode())
            done = await session.exec(f"python3 inside.py {SOCKET[backend]} {api.port} {other.port}", timeout=200)
        finally:
            run_dir = await session.close()
    said = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in done.stdout.splitlines()}
    assert said == {
        "pipelined": "HTTP/1.1 200 OK clean",  # the first request only: the second never left
        "absolute": "HTTP/1.1 403 Forbidden clean",
        "connect": "HTTP/1.1 403 Forbidden clean",
        "trace": "HTTP/1.1 403 Forbidden clean",  # the server would have sent the secret back
        "smuggled": "HTTP/1.1 200 OK clean",  # framed by chunked: the body is empty, no second request
        "h2": "HTTP/1.1 403 Forbidden clean",  # ALPN gave no h2: the preface is an HTTP/1.1 request that is refused
    }, done.stdout + done.stderr
    assert [path for path, _ in api.requests] == ["/first", "/smuggle"]
    assert {headers["authorization"] for _, headers in api.requests} == {f"Bearer {CANARY}"}
    assert other.requests == []
    events = [e for e in read_record(run_dir).events if e.type == "egress"]
    assert all(e.host == "api.test" and e.intercepted for e in events) and len(events) == 6
    assert not [p for p in run_dir.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
