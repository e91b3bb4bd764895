"""HTTPS to a host with a secret: the proxy terminates TLS with a leaf of the session's own CA,
adds the header inside and sends the request on over verified TLS. A test plays the sandbox on
the proxy's Unix socket; upstreams are HTTPS servers on 127.0.0.1 with a test CA's certificates,
reached through `resolve` names. Nothing else is contacted."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import pytest

from coderoom.egress.interception import SessionCA
from coderoom.egress.proxy import MAX_HEAD_BYTES

from .proxyclient import SECRET, get, https_through, intercepting, running
from .upstreams import EARLY_ANSWER, TestCA, early_answerer, http_upstream, server_context

CANARY = "canary-tls-5b0e21d9f4"


def issuer(peer: dict[str, object]) -> str:
    return dict(pair[0] for pair in peer["issuer"])["commonName"]  # type: ignore[attr-defined]


async def test_the_secret_is_added_inside_https_in_place_of_the_sandboxs_own_header(tmp_path: Path) -> None:
    async with intercepting(tmp_path, CANARY) as (seen, proxy):
        assert proxy.proxy.ca is not None
        target = f"api.test:{seen.port}"
        answer, peer = await asyncio.to_thread(
            https_through, proxy, "api.test", seen.port, get("/x", target, "Authorization: mine\r\n"), pem=proxy.proxy.ca.pem()
        )
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello from upstream\n")
    assert issuer(peer) == "coderoom egress session CA"  # the proxy's leaf, not the upstream's
    assert seen.requests == [("/x", seen.requests[0][1])]
    assert seen.requests[0][1]["authorization"] == f"Bearer {CANARY}"
    (event,) = proxy.events
    assert (event.method, event.host, event.allowed, event.intercepted, event.reason) == ("GET", "api.test", True, True, "")
    assert CANARY not in repr(event.fields())


async def test_inside_https_the_host_header_must_name_the_tls_host(tmp_path: Path) -> None:
    async with intercepting(tmp_path, CANARY) as (seen, proxy):
        assert proxy.proxy.ca is not None
        answer, _ = await asyncio.to_thread(
            https_through, proxy, "api.test", seen.port, get("/x", "other.test"), pem=proxy.proxy.ca.pem()
        )
    assert answer.startswith(b"HTTP/1.1 403") and b"does not name the TLS host" in answer
    assert seen.requests == []
    assert "does not name the TLS host" in proxy.events[0].reason


async def test_inside_https_a_connect_is_refused_and_nothing_goes_upstream(tmp_path: Path) -> None:
    """A tunnel inside the intercepted one would not be relayed: refused before any upstream connect."""
    async with intercepting(tmp_path, CANARY) as (seen, proxy):
        assert proxy.proxy.ca is not None
        head = f"CONNECT / HTTP/1.1\r\nHost: api.test:{seen.port}\r\n\r\n".encode()
        answer, _ = await asyncio.to_thread(https_through, proxy, "api.test", seen.port, head, pem=proxy.proxy.ca.pem())
    assert answer.startswith(b"HTTP/1.1 403") and b"CONNECT inside" in answer
    assert seen.requests == [] and "CONNECT inside" in proxy.events[0].reason


async def test_an_upstream_whose_certificate_fails_verification_is_refused_and_recorded(tmp_path: Path) -> None:
    async with intercepting(tmp_path, CANARY, shown_by=TestCA(tmp_path, "untrusted CA")) as (seen, proxy):
        assert proxy.proxy.ca is not None
        answer, _ = await asyncio.to_thread(
            https_through, proxy, "api.test", seen.port, get("/x", f"api.test:{seen.port}"), pem=proxy.proxy.ca.pem()
        )
    assert answer.startswith(b"HTTP/1.1 403") and b"certificate failed verification" in answer
    assert seen.requests == []
    (event,) = proxy.events
    assert not event.allowed and event.intercepted and "certificate failed verification" in event.reason


async def test_a_host_without_a_secret_stays_a_tunnel_and_shows_its_own_certificate(tmp_path: Path) -> None:
    test_ca = TestCA(tmp_path)
    with http_upstream(tls=test_ca.server_context("other.test")) as seen:
        proxy = await running(
            tmp_path,
            {"allow": [f"api.test:{seen.port}", f"other.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1"}, "secrets": [SECRET]},
            environ={"TOKEN": CANARY},
        )  # fmt: skip
        answer, peer = await asyncio.to_thread(
            https_through, proxy, "other.test", seen.port, get("/y", f"other.test:{seen.port}", "Connection: close\r\n"), cafile=test_ca.cafile
        )
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 200") and issuer(peer) == "egress test CA"
    assert "authorization" not in seen.requests[0][1]
    (event,) = proxy.events
    assert (event.method, event.intercepted, event.allowed) == ("CONNECT", False, True)


def test_the_session_ca_signs_nothing_that_verifies_for_a_host_without_a_secret(tmp_path: Path) -> None:
    ca = SessionCA(["api.test"])
    for host, verifies in (("api.test", True), ("other.test", False), ("api.test.evil", False)):
        certificate, key = ca.sign(host)
        with http_upstream(tls=server_context(certificate, key, tmp_path, host)) as seen:
            context = ssl.create_default_context(cadata=ca.pem().decode())
            try:
                with socket.create_connection(("127.0.0.1", seen.port), timeout=30) as raw:
                    context.wrap_socket(raw, server_hostname=host).close()
                outcome = "verified"
            except ssl.SSLCertVerificationError as exc:
                outcome = exc.verify_message
        assert (outcome == "verified") == verifies, (host, outcome)
        if not verifies:
            assert "permitted subtree violation" in outcome


def test_the_session_ca_is_short_lived_and_its_key_is_never_in_what_it_hands_out() -> None:
    ca = SessionCA(["api.test"])
    assert (ca.not_after - ca.not_before).total_seconds() <= 2 * 24 * 3600 + 120
    assert b"PRIVATE" not in ca.pem()


async def test_a_tunnel_that_moves_no_byte_for_the_idle_deadline_is_cut_and_says_so(tmp_path: Path) -> None:
    test_ca = TestCA(tmp_path)
    with http_upstream(tls=test_ca.server_context("api.test")) as seen:
        proxy = await running(tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}}, idle_timeout_s=0.5)

        def idle_tunnel() -> bytes:
            with socket.socket(socket.AF_UNIX) as raw:
                raw.settimeout(30)
                raw.connect(str(proxy.proxy.socket_path))
                raw.sendall(f"CONNECT api.test:{seen.port} HTTP/1.1\r\nHost: api.test\r\n\r\n".encode())
                raw.recv(4096)
                with ssl.create_default_context(cafile=test_ca.cafile).wrap_socket(raw, server_hostname="api.test") as tls:
                    return tls.recv(100)  # nothing is asked: the proxy cuts the tunnel

        assert await asyncio.to_thread(idle_tunnel) == b""
        await proxy.proxy.close()
    (event,) = proxy.events
    assert event.allowed and "IDLE_TIMEOUT_S = 0.5 s" in event.reason


async def test_a_request_body_that_stops_is_cut_at_the_idle_deadline(tmp_path: Path) -> None:
    with http_upstream() as seen:
        target = f"api.test:{seen.port}"
        proxy = await running(tmp_path, {"allow": [target], "resolve": {"api.test": "127.0.0.1"}}, idle_timeout_s=0.5)
        reader, writer = await asyncio.open_unix_connection(str(proxy.proxy.socket_path))
        writer.write(f"POST http://{target}/p HTTP/1.1\r\nHost: {target}\r\nContent-Length: 100\r\n\r\nonly-this".encode())
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        await asyncio.sleep(0.05)
        await proxy.proxy.close()
    assert b"IDLE_TIMEOUT_S = 0.5 s" in answer  # the sandbox is told which limit cut it
    (event,) = proxy.events
    assert "IDLE_TIMEOUT_S = 0.5 s" in event.reason


async def test_a_head_larger_than_the_bound_is_refused_even_when_it_arrives_in_one_read(tmp_path: Path) -> None:
    with http_upstream() as seen:
        target = f"api.test:{seen.port}"
        proxy = await running(tmp_path, {"allow": [target], "resolve": {"api.test": "127.0.0.1"}})
        big = f"X-Big: {'a' * (MAX_HEAD_BYTES + 1000)}\r\n"  # well under one 64 KiB read
        answer = await proxy.send(get(f"http://{target}/", target, big))
        small = await proxy.send(get(f"http://{target}/", target, f"X-Small: {'a' * 1000}\r\n"))
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 400") and b"MAX_HEAD_BYTES" in answer
    assert small.startswith(b"HTTP/1.1 200")
    assert [path for path, _ in seen.requests] == ["/"]


@pytest.mark.parametrize("table", [{"secrets": [SECRET]}])
def test_a_policy_with_secrets_gives_its_proxy_a_ca_for_their_hosts_only(tmp_path: Path, table: dict[str, object]) -> None:
    from coderoom.egress.policy import parse_policy
    from coderoom.egress.proxy import Budget, Proxy

    policy = parse_policy({"allow": ["api.test", "other.test"], **table}, source="test")
    proxy = Proxy(policy, tmp_path / "s", Budget(1, 1), lambda _: None)
    assert proxy.ca is not None and proxy.ca.hosts == ("api.test",)
    plain = Proxy(parse_policy({"allow": ["api.test"]}, source="test"), tmp_path / "s", Budget(1, 1), lambda _: None)
    assert plain.ca is None


async def test_a_secret_h11_cannot_send_is_refused_inside_tls_without_showing_it(tmp_path: Path) -> None:
    async with intercepting(tmp_path, f" {CANARY} ", secret={**SECRET, "format": "{}"}) as (seen, proxy):
        assert proxy.proxy.ca is not None
        target = f"api.test:{seen.port}"
        answer, _ = await asyncio.to_thread(https_through, proxy, "api.test", seen.port, get("/x", target), pem=proxy.proxy.ca.pem())
    assert answer.startswith(b"HTTP/1.1 400") and b"could not forward" in answer  # read through TLS: not plain text
    assert CANARY.encode() not in answer and CANARY not in repr(proxy.events[0].fields())
    assert seen.requests == []


async def test_inside_https_an_upstream_s_early_answer_reaches_the_sandbox(tmp_path: Path) -> None:
    """E-N2 inside intercepted TLS: the upstream refuses an upload from its head alone; the proxy
    relays that, sends none of the body, and closes once the sandbox stops sending (TLS has no
    half close)."""
    test_ca = TestCA(tmp_path)
    with early_answerer(tls=test_ca.server_context("api.test")) as seen:
        target = f"api.test:{seen.port}"
        proxy = await running(
            tmp_path, {"allow": [target], "resolve": {"api.test": "127.0.0.1"}, "secrets": [SECRET]},
            environ={"TOKEN": CANARY}, upstream_cafile=test_ca.cafile,
        )  # fmt: skip
        assert proxy.proxy.ca is not None
        head = f"PUT /upload HTTP/1.1\r\nHost: {target}\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n".encode()
        answer, _ = await asyncio.to_thread(https_through, proxy, "api.test", seen.port, head, pem=proxy.proxy.ca.pem())
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 413") and answer.endswith(EARLY_ANSWER), answer
    assert [h.split(b"\r\n")[0] for h in seen.raw] == [b"PUT /upload HTTP/1.1"]
    (event,) = proxy.events
    assert (event.method, event.allowed, event.intercepted, event.reason) == ("PUT", True, True, "")
