"""Egress by allowlist on both backends (one set of specifications): real sandboxes, the real
proxy, upstream servers on the host's 127.0.0.1 reached only through `resolve` names
(`api.test`, `pypi.test`). Nothing else is contacted: the probes that name other addresses are
refused by the proxy (which never connects for them) or fail inside the sandbox's own network
namespace (only lo: bubblewrap's, or the container's `network none`), so a sandbox reaches the
host's loopback servers only through the proxy. Docker tests are skipped without an engine
unless CODEROOM_REQUIRE_DOCKER=1 (CI), as in tests/sandbox."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.egress.interception import SessionCA
from coderoom.egress.policy import parse_policy
from coderoom.egress.session import UPSTREAM_CA_ENV
from coderoom.record.events import Egress
from coderoom.record.reader import read_record
from coderoom.sandboxes import Limits
from coderoom.sandboxes.sdk_session_adapter import backend_session
from coderoom.service.session import Session

from .probes import PROBES
from .upstreams import EARLY_ANSWER, TestCA, early_answerer, http_upstream, server_context

CANARY = "canary-egress-7d41b0e9c3"


# where each backend binds the folder of the proxy's socket inside the sandbox
SOCKET_FOLDER = {"local": "/opt/coderoom/egress", "docker": "/run/coderoom-egress"}


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest) -> str:
    require_backend(request.param)
    return str(request.param)


def allowlist(port: int, **extra: object) -> Limits:
    table = {"allow": [f"api.test:{port}"], "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1"}, **extra}
    return Limits(egress=parse_policy(table, source="test"))


def outcome(stdout: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in stdout.splitlines())


@pytest.mark.slow
async def test_only_the_allowed_host_is_reached_and_every_other_way_out_is_refused(tmp_path: Path, backend: str) -> None:
    with http_upstream() as seen:
        session = await Session.open(model="offline", sandbox=backend, limits=allowlist(seen.port), runs_dir=tmp_path)
        try:
            await session.write_file("probes.py", PROBES.encode())
            result = await session.exec(f"python3 probes.py {seen.port}", timeout=110)
        finally:
            run_dir = await session.close()
    got = outcome(result.stdout)
    assert got.pop("allowed") == "200", result.stderr
    for name in ("other_host", "raw_ip", "ipv6_literal", "decimal_ip"):
        assert got.pop(name).startswith("ERROR HTTPError HTTP Error 403"), name
    assert " 403 " in got.pop("connect_unlisted")
    assert got.pop("sni_differs").startswith("CLOSED")
    assert " 403 " in got.pop("host_differs")
    assert got.pop("dns").startswith("ERROR gaierror")
    assert got.pop("direct_connect").startswith("ERROR ConnectionRefusedError")  # the sandbox's own lo
    assert got.pop("udp_dns").startswith("ERROR OSError")  # no route: only lo (nothing is sent)
    assert got == {}
    assert [path for path, _ in seen.requests] == ["/ok"]  # the one allowed request, nothing else
    events = [e for e in read_record(run_dir).events if e.type == "egress"]
    assert [(e.host, e.allowed) for e in events if e.allowed] == [("api.test", True)]
    reasons = " | ".join(e.reason for e in events if not e.allowed)
    for why in ("other.test:", "raw IP address", "is not the CONNECT host", "Host header"):
        assert why in reasons
    shown = subprocess.run(
        [sys.executable, "-m", "coderoom", "show", str(run_dir)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "300"},
    )  # fmt: skip
    assert "egress GET api.test" in shown.stdout and "refused" in shown.stdout, shown.stderr


@pytest.mark.slow
async def test_the_secret_reaches_the_bound_host_only_and_never_the_sandbox_or_the_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    monkeypatch.setenv("EGRESS_TEST_TOKEN", CANARY)
    with http_upstream() as seen:
        secret = {"host": "api.test", "header": "Authorization", "env": "EGRESS_TEST_TOKEN", "format": "Bearer {}", "plain_http": True}
        limits = allowlist(seen.port, allow=[f"api.test:{seen.port}", f"other.test:{seen.port}"], secrets=[secret])
        session = await Session.open(model="offline", sandbox=backend, limits=limits, runs_dir=tmp_path)
        try:
            fetch = (
                f"python3 -c \"import urllib.request as u; [print(u.urlopen(f'http://{{h}}:{seen.port}/', timeout=20).status)"
                " for h in ('api.test', 'other.test')]\" > fetched.txt; env > env.txt; cat /proc/self/environ >> env.txt"
            )
            done = await session.exec(fetch, timeout=110)
            pattern = CANARY[:-1] + f"[{CANARY[-1]}]"  # a regex: grep's own command line does not match it
            searched = await session.exec(
                f"grep -r -l -e '{pattern}' /workspace /tmp /etc {SOCKET_FOLDER[backend]} /proc/self/environ 2>/dev/null; echo searched",
                timeout=110,
            )
        finally:
            run_dir = await session.close()
    assert done.exit_code == 0, done.stderr
    assert [headers.get("authorization") for _, headers in seen.requests] == [f"Bearer {CANARY}", None]
    assert searched.stdout.strip() == "searched", searched.stdout  # not in the env (env.txt), files or /etc
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and CANARY.encode() in p.read_bytes()]
    assert leaked == []


FETCH_EACH = """
import sys, urllib.request as u
for path in sys.argv[2:]:
    try:
        print(len(u.urlopen(f"http://api.test:{sys.argv[1]}{path}", timeout=20).read()))
    except Exception as e:
        print(type(e).__name__, str(e)[:100])
"""


async def fetched_each(backend: str, tmp_path: Path, limits: Limits, port: int, *paths: str) -> tuple[list[str], list[Egress]]:
    """What the sandbox printed for each path it fetched from api.test, and the record's egress events."""
    session = await Session.open(model="offline", sandbox=backend, limits=limits, runs_dir=tmp_path)
    try:
        await session.write_file("fetch.py", FETCH_EACH.encode())
        result = await session.exec(f"python3 fetch.py {port} {' '.join(paths)}", timeout=110)
    finally:
        run_dir = await session.close()
    events = [e for e in read_record(run_dir).events if isinstance(e, Egress)]
    return result.stdout.splitlines(), events


@pytest.mark.slow
async def test_the_byte_budget_cuts_the_download_and_refuses_what_follows_by_name(tmp_path: Path, backend: str) -> None:
    with http_upstream() as seen:
        limits = replace(allowlist(seen.port), egress_bytes=200_000)
        lines, events = await fetched_each(backend, tmp_path, limits, seen.port, "/big?n=1000000", "/ok")
    assert not lines[0].isdigit() and lines[1].startswith("HTTPError HTTP Error 403")
    assert events[0].allowed and "egress_bytes budget of 200000 bytes is used up" in events[0].reason
    assert not events[1].allowed and "egress_bytes budget" in events[1].reason


@pytest.mark.slow
async def test_the_connection_limit_refuses_the_next_connection_by_name(tmp_path: Path, backend: str) -> None:
    with http_upstream() as seen:
        limits = replace(allowlist(seen.port), egress_connections=2)
        lines, events = await fetched_each(backend, tmp_path, limits, seen.port, "/ok", "/ok", "/ok")
    assert lines[:2] == ["20", "20"] and lines[2].startswith("HTTPError HTTP Error 403")
    assert "egress_connections limit of 2 is reached" in events[2].reason
    assert len(seen.requests) == 2


def build_wheel(into: Path) -> Path:
    """A tiny pure-Python wheel, written by hand (a wheel is a zip with a dist-info)."""
    name, version = "egress_probe", "1.0"
    wheel = into / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "ANSWER = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    import base64
    import hashlib

    rows = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(text.encode())}")
    rows.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = "\n".join(rows) + "\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.mark.slow
async def test_pip_installs_from_a_loopback_index_with_only_that_host_allowed(tmp_path: Path, backend: str) -> None:
    index = tmp_path / "index"
    (index / "simple" / "egress-probe").mkdir(parents=True)
    wheel = build_wheel(index)
    (index / "simple" / "egress-probe" / "index.html").write_text(f'<a href="/{wheel.name}">{wheel.name}</a>\n')
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", str(index)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(server.stdout.readline), 30)
        port = int(line.split("port ")[1].split()[0])
        limits = Limits(egress=parse_policy({"allow": [f"pypi.test:{port}"], "resolve": {"pypi.test": "127.0.0.1"}}, source="test"))
        session = await Session.open(model="offline", sandbox=backend, limits=limits, runs_dir=tmp_path / "runs")
        try:
            result = await session.exec(
                f"python3 -m pip install --disable-pip-version-check --no-cache-dir --target deps "
                f"--index-url http://pypi.test:{port}/simple --trusted-host pypi.test egress-probe "
                "&& PYTHONPATH=deps python3 -c 'import egress_probe; print(egress_probe.ANSWER)'",
                timeout=110,
            )
        finally:
            await session.close()
    finally:
        server.kill()
        server.wait()
    assert result.exit_code == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("42")


@pytest.mark.slow
def test_sandbox_run_reaches_the_allowed_host_and_says_what_was_refused(tmp_path: Path, backend: str) -> None:
    fetch = (
        "import sys, urllib.request as u\n"
        "print(u.urlopen(f'http://api.test:{sys.argv[1]}/', timeout=20).status)\n"
        "try: u.urlopen(f'http://other.test:{sys.argv[1]}/', timeout=20)\n"
        "except Exception as e: print(e)\n"
    )
    with http_upstream() as seen:
        done = subprocess.run(
            [sys.executable, "-m", "coderoom", "sandbox", "run", "--sandbox", backend, "--allow-host", f"api.test:{seen.port}",
             "--resolve", "api.test=127.0.0.1", "--", "python3", "-c", fetch, str(seen.port)],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["200", "HTTP Error 403: Forbidden"]
    assert f"coderoom: egress GET other.test:{seen.port} refused: other.test:{seen.port}: this host" in done.stderr


HTTPS_PROBES = r"""
import os, shutil, ssl, subprocess, sys, urllib.request
api, own, other, test_ca = sys.argv[1:5]

def show(name, run):
    try:
        print(name, run(), flush=True)
    except Exception as exc:
        print(name, "ERROR", type(exc).__name__, str(exc)[:300].replace("\n", " "), flush=True)

def curl(url):
    done = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", url], capture_output=True, text=True, timeout=60)
    return done.stdout or "ERROR " + done.stderr.strip()[:300]

show("urllib", lambda: urllib.request.urlopen(f"https://api.test:{api}/urllib", timeout=20).status)
try:
    import requests
    show("requests", lambda: requests.get(f"https://api.test:{api}/requests", timeout=20).status_code)
except ImportError:
    print("requests ABSENT")
if shutil.which("curl"):
    show("curl", lambda: curl(f"https://api.test:{api}/curl"))
else:
    print("curl ABSENT")
own_ca = ssl.create_default_context(cafile=test_ca)  # the upstream's own CA only: no session CA in it
show("tunnel_own_cert", lambda: urllib.request.urlopen(f"https://own.test:{own}/t", timeout=20, context=own_ca).status)
show("constrained", lambda: urllib.request.urlopen(f"https://other.test:{other}/c", timeout=20).status)
bundle = open(os.environ["SSL_CERT_FILE"], "rb").read()
system = open("/etc/ssl/certs/ca-certificates.crt", "rb").read().rstrip(b"\n")  # the sandbox's own roots
print("bundle", "system+ca" if bundle.startswith(system) and bundle.count(b"BEGIN CERTIFICATE") == system.count(b"BEGIN CERTIFICATE") + 1 else "OTHER")
print("variables", sorted({os.environ[n] for n in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT")}))
"""


def requests_and_its_dependencies() -> bytes:
    """A tar of the host's `requests` and the pure-Python packages it needs, for a sandbox whose
    Python has none (the image has no index to install from)."""
    import importlib
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in ("requests", "urllib3", "idna", "certifi"):
            folder = Path(importlib.import_module(name).__file__ or "").parent
            archive.add(folder, arcname=name, filter=lambda info: None if "__pycache__" in info.name else info)
    return buffer.getvalue()


def session_ca(session: Session) -> SessionCA:
    """The session CA of a running session's proxy (host memory: only a test on the host reaches it)."""
    inner = backend_session(session._live.session)
    core = getattr(inner, "_core", None) or inner.sandbox  # Docker's DockerSandbox, or the LocalSandbox
    ca = core._proxy.proxy.ca
    assert ca is not None
    return ca


@pytest.mark.slow
async def test_https_to_the_secret_host_is_intercepted_to_add_it_and_nothing_else_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    test_ca = TestCA(tmp_path)
    monkeypatch.setenv("EGRESS_TEST_TOKEN", CANARY)
    monkeypatch.setenv(UPSTREAM_CA_ENV, str(test_ca.cafile))
    later: list[ssl.SSLContext] = []  # other.test's certificate, once the session CA exists
    deferred = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    deferred.sni_callback = lambda tls, _name, _context: setattr(tls, "context", later[0])  # type: ignore[assignment]
    with (
        http_upstream(tls=test_ca.server_context("api.test")) as api,
        http_upstream(tls=test_ca.server_context("own.test")) as own,
        http_upstream(tls=deferred) as other,
    ):
        secret = {"host": "api.test", "header": "Authorization", "env": "EGRESS_TEST_TOKEN", "format": "Bearer {}"}
        table = {
            "allow": [f"api.test:{api.port}", f"own.test:{own.port}", f"other.test:{other.port}"],
            "resolve": {name: "127.0.0.1" for name in ("api.test", "own.test", "other.test")},
            "secrets": [secret],
        }
        session = await Session.open(model="offline", sandbox=backend, limits=Limits(egress=parse_policy(table, source="test")), runs_dir=tmp_path / "runs")
        try:
            ca = session_ca(session)
            certificate, key = ca.sign("other.test")  # the session CA's own leaf for a host without a secret
            later.append(server_context(certificate, key, tmp_path, "other.test"))
            await session.write_file("https.py", HTTPS_PROBES.encode())
            await session.write_file("test-ca.pem", test_ca.cafile.read_bytes())
            await session.write_file("deps.tar", requests_and_its_dependencies())
            result = await session.exec(
                "python3 -c \"import tarfile; tarfile.open('deps.tar').extractall('deps')\" && "
                f"PYTHONPATH=deps python3 https.py {api.port} {own.port} {other.port} test-ca.pem",
                timeout=110,
            )
            pattern = CANARY[:-1] + f"[{CANARY[-1]}]"
            searched = await session.exec(
                f"env > env.txt; grep -r -l -e '{pattern}' -e 'PRIVATE[ ]KEY' /workspace /tmp /etc {SOCKET_FOLDER[backend]} "
                "/proc/self/environ 2>/dev/null; echo searched",
                timeout=110,
            )
        finally:
            run_dir = await session.close()
    got = outcome(result.stdout)
    assert got.pop("urllib") == "200", result.stdout + result.stderr
    clients = {name: got.pop(name) for name in ("requests", "curl")}
    ran = [name for name, said in clients.items() if not said.startswith("ABSENT")]
    assert all(clients[name] == "200" for name in ran), clients
    assert "requests" in ran and ("curl" in ran or backend == "docker"), clients  # the image has no curl
    assert got.pop("tunnel_own_cert") == "200"
    assert got.pop("bundle") == "system+ca"  # the image's roots on Docker, the host's bound /etc/ssl locally
    assert got.pop("variables") == str([f"{SOCKET_FOLDER[backend]}/ca-bundle.pem"])
    constrained = got.pop("constrained")
    assert "CERTIFICATE_VERIFY_FAILED" in constrained and "permitted subtree violation" in constrained, constrained
    paths = [path for path, _ in api.requests]
    assert paths == ["/urllib", *(f"/{name}" for name in ran)]
    assert {headers.get("authorization") for _, headers in api.requests} == {f"Bearer {CANARY}"}
    assert [headers.get("authorization") for _, headers in own.requests] == [None]
    assert searched.stdout.strip() == "searched", searched.stdout  # no canary, no private key inside
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and (CANARY.encode() in p.read_bytes() or b"PRIVATE KEY" in p.read_bytes())]
    assert leaked == []
    events = [e for e in read_record(run_dir).events if e.type == "egress"]
    intercepted = [(e.method, e.host, e.allowed) for e in events if e.intercepted]
    assert intercepted == [("GET", "api.test", True)] * len(paths)
    assert [(e.method, e.host) for e in events if e.host != "api.test"] == [("CONNECT", "own.test"), ("CONNECT", "other.test")]
    print("clients:", ["urllib", *ran], "absent:", [n for n in ("requests", "curl") if n not in ran])


EARLY_PROBES = r"""
import http.client, socket, sys
port = int(sys.argv[1])
target, host = f"http://api.test:{port}/upload", f"api.test:{port}"

def show(name, run):
    try:
        print(name, run(), flush=True)
    except Exception as exc:
        print(name, "ERROR", type(exc).__name__, str(exc)[:200].replace("\n", " "), flush=True)

def chunked_upload():
    # 8 MiB, chunked: more than every buffer between here and the upstream holds
    conn = http.client.HTTPConnection("127.0.0.1", 3128, timeout=60)
    body = (b"u" * 65536 for _ in range(128))
    conn.request("POST", target, body=body, headers={"Host": host}, encode_chunked=True)
    answer = conn.getresponse()
    said = f"{answer.status} {answer.read().decode().strip()}"
    conn.close()
    return said

def expect_continue():
    # the body waits for `100 Continue`; a server that refuses it answers at once instead
    with socket.create_connection(("127.0.0.1", 3128), timeout=60) as s:
        s.sendall(f"PUT {target} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n".encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer.split(b"\r\n")[0].decode() + " " + answer.rsplit(b"\r\n\r\n", 1)[-1].decode().strip()

show("chunked_upload", chunked_upload)
show("expect_continue", expect_continue)
"""


@pytest.mark.slow
async def test_an_upstream_that_answers_before_reading_the_body_is_heard(tmp_path: Path, backend: str) -> None:
    """E-N2: the upstream's early answer reaches the sandbox (the rest of the body is not sent)."""
    with early_answerer() as seen:
        session = await Session.open(model="offline", sandbox=backend, limits=allowlist(seen.port), runs_dir=tmp_path)
        try:
            await session.write_file("early.py", EARLY_PROBES.encode())
            result = await session.exec(f"python3 early.py {seen.port}", timeout=110)
        finally:
            run_dir = await session.close()
    got = outcome(result.stdout)
    answer = EARLY_ANSWER.decode().strip()
    events = [e for e in read_record(run_dir).events if e.type == "egress"]
    assert got == {"chunked_upload": f"413 {answer}", "expect_continue": f"HTTP/1.1 413 Content Too Large {answer}"}, (result.stderr, events)
    assert [head.split(b" ")[0] for head in seen.raw] == [b"POST", b"PUT"]
    assert sorted((e.method, e.allowed, e.reason) for e in events) == [("POST", True, ""), ("PUT", True, "")]
    assert all(e.bytes_up < 8 * 65536 * 128 for e in events)  # the body stopped with the answer
