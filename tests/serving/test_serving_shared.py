"""Both servers, the page (`coderoom serve`) and MCP over HTTP (`coderoom mcp --http`), serve
through one module, `coderoom.serving`: the same guard layers in both applications, the same
answers to a request without the token, with a foreign Host or Origin, the same refusal of a
non-loopback address, every offered backend prepared before the socket listens, and no second
uvicorn server or token check anywhere else. Against the real commands on 127.0.0.1."""

from __future__ import annotations

import ast
import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coderoom.mcp_server.policy import ReadPolicy
from coderoom.mcp_server.serve import http_app
from coderoom.mcp_server.tools import ServerSettings, build_server
from coderoom.sandboxes.limits import Limits
from coderoom.service import SessionManager
from coderoom.serving.guard import BearerToken, HostCheck, OriginCheck
from coderoom.web.app import WebConfig, build_app
from coderoom.web.guard import Secrets
from coderoom.web.live import Choices
from mcp_process import HttpServer, server_env, start_http
from web.served import Served, serve

SRC = Path(__file__).resolve().parents[2] / "src" / "coderoom"
SHARED_LAYERS = [HostCheck, BearerToken, OriginCheck]
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}).encode()
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def layers(app: Any) -> list[type]:
    """The types of the ASGI apps a request passes through, outermost first (each holds the next as `.app`)."""
    found: list[type] = []
    while app is not None and len(found) < 50:
        found.append(type(app))
        app = getattr(app, "app", None)
    return found


def test_both_applications_sit_behind_the_shared_guard_in_the_same_order(tmp_path: Path) -> None:
    manager = SessionManager(runs_dir=tmp_path / "runs")
    web = build_app(WebConfig(tmp_path / "runs", Choices(["offline"], ["local"]), frozenset({"127.0.0.1:1"}), Secrets()), manager)
    settings = ServerSettings(None, "local", Limits(), tmp_path / "runs", ReadPolicy([]))
    mcp = http_app(build_server(manager, settings), host="127.0.0.1", port=1, token="t")
    for name, app in (("serve", web), ("mcp --http", mcp)):
        stack = layers(app.build_middleware_stack())
        shared = [layer for layer in stack if layer in SHARED_LAYERS]
        assert shared == SHARED_LAYERS, (name, stack)


def _send(port: int, method: str, path: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[str, int, str, str, bytes | None, dict[str, str]]]]:
    """(name, port, token, method, path, body, headers) of a request each server answers 200 with the token."""
    base = tmp_path_factory.mktemp("both")
    (base / "runs").mkdir()
    page: Served = serve(base / "runs")
    mcp: HttpServer = start_http("--runs", str(base / "mcp-runs"), cwd=base)
    mcp_port = int(mcp.url.split(":")[2].split("/")[0])
    yield [
        ("serve", page.port, page.token, "GET", "/api/config", None, {}),
        ("mcp --http", mcp_port, mcp.token, "POST", "/mcp", INITIALIZE, MCP_HEADERS),
    ]
    page.stop()
    mcp.process.terminate()
    mcp.process.communicate(timeout=60)


def test_both_servers_answer_alike_to_a_missing_token_a_foreign_host_or_origin(both) -> None:  # noqa: ANN001
    for name, port, token, method, path, body, extra in both:
        host = {"Host": f"127.0.0.1:{port}"}
        auth = {"Authorization": f"Bearer {token}"}
        wrong = {"Authorization": f"Bearer {token[:-1]}{'A' if token[-1] != 'A' else 'B'}"}
        cases = [
            ({}, 401), (wrong, 401),
            ({**auth, "Host": f"evil.example:{port}"}, 421),
            ({**auth, "Origin": "http://evil.example"}, 403),
            ({**auth, "Origin": f"http://127.0.0.1:{port}"}, 200), (auth, 200),
        ]
        for headers, expected in cases:
            status, reply_headers, reply = _send(port, method, path, {**extra, **host, **headers}, body)
            assert status == expected, (name, headers, reply[:200])
            if status == 401:
                assert reply_headers["www-authenticate"].startswith("Bearer") and b"bearer token" in reply, name


def _refusal(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coderoom", *args], capture_output=True, text=True, timeout=120,
                          env=server_env(), cwd=cwd, stdin=subprocess.DEVNULL)  # fmt: skip


def test_both_commands_refuse_a_non_loopback_address_in_the_same_words(tmp_path: Path) -> None:
    page = _refusal("serve", "--host", "0.0.0.0", "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    mcp = _refusal("mcp", "--http", "--host", "0.0.0.0", "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert (page.returncode, mcp.returncode) == (2, 2)
    assert page.stderr == mcp.stderr and "is not a loopback address: add --allow-remote" in page.stderr
    assert not (tmp_path / "runs").exists()


SPY = """
import os, sys
import coderoom.sandboxes.registry as registry  # prepare_backend, which every server calls, looks its backend up here

def listening():
    '''Whether a socket of this process listens (TCP state 0A in /proc/net/tcp*).'''
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in mine:
                return True
    return False

class Spy:
    def __init__(self, backend):
        self.backend = backend
    def __getattr__(self, name):
        return getattr(self.backend, name)
    def prepare(self, spec, progress):
        print(f"PREPARE {spec.backend} listening={listening()}", file=sys.stderr, flush=True)
        return self.backend.prepare(spec, progress)

real = registry.get_backend
registry.get_backend = lambda name, **kw: Spy(real(name, **kw))
from coderoom.cli import main
sys.argv[0] = "coderoom"
main()
"""


def _prepared(stderr: str) -> list[str]:
    return [line.split()[1] + " " + line.split()[2] for line in stderr.splitlines() if line.startswith("PREPARE ")]


def test_serve_prepares_every_offered_backend_before_it_listens(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    page = serve(tmp_path / "runs", command=(sys.executable, "-c", SPY))
    try:
        offered = json.loads(page.authed("GET", "/api/config").body)["sandboxes"]
    finally:
        assert page.stop() == 143
    assert _prepared(page.process.stderr.read()) == [f"{name} listening=False" for name in offered]


def test_mcp_over_http_prepares_its_backend_before_it_listens(tmp_path: Path) -> None:
    mcp = start_http("--sandbox", "local", "--runs", str(tmp_path / "runs"), cwd=tmp_path, command=(sys.executable, "-c", SPY))
    mcp.process.terminate()
    _, rest = mcp.process.communicate(timeout=60)
    assert _prepared("".join(mcp.stderr) + rest) == ["local listening=False"]


UVICORN_MODULES = ("serving/server.py", "serving/connections.py")
"""The server, and the protocol it runs connections with (a head deadline, a cap)."""


def _offences(relative: str, node: ast.AST) -> list[str]:
    """What `node` of src/coderoom/RELATIVE does that only `coderoom.serving` may do."""
    found = []
    if isinstance(node, (ast.Import, ast.ImportFrom)) and relative not in UVICORN_MODULES:
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if any(name.split(".")[0] == "uvicorn" for name in names):
            found.append(f"{relative} imports uvicorn")
    if isinstance(node, ast.ClassDef) and relative != "serving/server.py":
        if any(ast.unparse(base).split(".")[-1] == "Server" for base in node.bases):
            found.append(f"{relative} subclasses a Server")
    checks_headers = relative != "serving/guard.py" and not relative.startswith("models/")  # models/ sends one to a model server
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and checks_headers:
        if node.value.lower() in ("authorization", b"authorization"):
            found.append(f"{relative} reads an Authorization header")
    if isinstance(node, ast.Attribute) and node.attr == "compare_digest":
        # web/guard.py: the CSRF token, no bearer; cluster/driver_only.py: the driver's token on
        # a Ray actor whose handle nodes hold (R-F9), no HTTP at all
        if relative not in ("serving/guard.py", "web/guard.py", "cluster/driver_only.py"):
            found.append(f"{relative} compares a secret")
    return found


def test_nothing_outside_serving_runs_uvicorn_or_checks_a_token() -> None:
    offences = [
        offence
        for path in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        for offence in _offences(path.relative_to(SRC).as_posix(), node)
    ]
    assert not offences, "\n".join(offences)
