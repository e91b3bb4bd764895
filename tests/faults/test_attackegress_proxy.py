"""Egress pass (2026-12-06): the host proxy attacked as a sandbox would, on its Unix socket (what
code in the sandbox may use as well as the forwarder). Upstreams run on 127.0.0.1 and are
reached through `resolve` names; nothing else is contacted. See docs/security.md, "Egress pass"."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import ssl
from pathlib import Path

import pytest

from egress.proxyclient import get, running
from egress.upstreams import client_hello, http_upstream, tcp_recorder

from coderoom.egress.policy import refused_address
from coderoom.egress.proxy import HEAD_TIMEOUT_S, MAX_OPEN


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_connections_past_the_open_cap_are_closed_at_once_and_hold_no_host_descriptor(tmp_path: Path) -> None:
    proxy = await running(tmp_path, {"allow": ["api.test:80"], "resolve": {"api.test": "127.0.0.1"}}, reset_ok=True)
    socket_path = str(proxy.proxy.socket_path)
    held = [await asyncio.open_unix_connection(socket_path) for _ in range(MAX_OPEN)]
    before = _open_descriptors()
    extra = [await asyncio.open_unix_connection(socket_path) for _ in range(300)]
    # each one past the cap ends long before the head deadline a held connection would wait for
    ends = await asyncio.wait_for(asyncio.gather(*(reader.read() for reader, _ in extra)), HEAD_TIMEOUT_S / 3)
    assert ends == [b""] * len(extra)
    for _, writer in extra:
        writer.close()
    await asyncio.sleep(0.2)
    assert _open_descriptors() <= before + 5  # the proxy kept none of the 300
    assert proxy.proxy.budget.open == MAX_OPEN
    assert len(proxy.events) == 1  # told once, however many were closed
    for _, writer in held:
        writer.close()
    await proxy.proxy.close()


async def test_refusals_past_the_connection_limit_are_recorded_once_not_once_per_reconnect(tmp_path: Path) -> None:
    proxy = await running(tmp_path, {"allow": ["api.test:80"], "resolve": {"api.test": "127.0.0.1"}}, max_connections=2, reset_ok=True)
    answers = [await proxy.send(get("http://evil.test/", "evil.test")) for _ in range(40)]
    await proxy.proxy.close()
    assert all(b" 403 " in answer for answer in answers)  # every one is still told why
    assert b"egress_connections limit of 2" in answers[-1]
    reasons = [event.reason for event in proxy.events]
    assert len(reasons) == 3 and "egress_connections limit of 2 is reached" in reasons[2]


async def test_a_body_framed_by_transfer_encoding_goes_upstream_without_a_content_length(tmp_path: Path) -> None:
    with http_upstream() as seen:
        target = f"api.test:{seen.port}"
        proxy = await running(tmp_path, {"allow": [target], "resolve": {"api.test": "127.0.0.1"}}, reset_ok=True)
        smuggle = (
            f"POST http://{target}/p HTTP/1.1\r\nHost: {target}\r\nContent-Length: 5\r\n"
            "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        )
        await proxy.send(smuggle.encode())  # the stub upstream answers before reading a chunked body
        await proxy.proxy.close()
    ((_, headers),) = seen.requests
    assert "content-length" not in headers and headers["transfer-encoding"] == "chunked"  # one framing only


async def test_a_head_too_large_to_parse_is_still_an_attempt_in_the_record(tmp_path: Path) -> None:
    proxy = await running(tmp_path, {"allow": ["api.test:80"], "resolve": {"api.test": "127.0.0.1"}}, reset_ok=True)
    answer = await proxy.send(get("http://api.test/", "api.test", f"X-Big: {'a' * 100_000}\r\n"))
    await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 400") or answer == b""  # the 400 may be lost to the reset
    (event,) = proxy.events
    assert event.method == "?" and event.reason.startswith("not valid HTTP") and not event.allowed


async def test_a_tunnel_without_sni_is_refused_with_words_that_say_so(tmp_path: Path) -> None:
    with tcp_recorder() as seen:
        target = f"api.test:{seen.port}"
        proxy = await running(tmp_path, {"allow": [target], "resolve": {"api.test": "127.0.0.1"}}, reset_ok=True)
        await proxy.send(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode(), then=client_hello(None))
        await proxy.proxy.close()
    assert seen.raw == []
    assert proxy.events[0].reason == "no server name is not the CONNECT host api.test"


@pytest.mark.parametrize(
    "address", ["2002:7f00:1::", "2002:a9fe:a9fe::1", "2002:c0a8:101::", "2002:a00:1::", "fec0::1"]
)
def test_6to4_forms_of_refused_addresses_and_site_local_ones_are_refused(address: str) -> None:
    assert refused_address(ipaddress.ip_address(address)) is not None


def test_a_6to4_form_of_a_global_address_is_not_refused_for_its_prefix_alone() -> None:
    assert refused_address(ipaddress.ip_address("2002:808:808::1")) is None  # computed only, never contacted


@pytest.mark.parametrize(
    "request_bytes, why",
    [
        ("GET http://evilapi.test:{port}/ HTTP/1.1\r\nHost: evilapi.test:{port}\r\n\r\n", "not in the allowlist"),
        ("GET http://api.test.:{port}/ HTTP/1.1\r\nHost: evil.test:{port}\r\n\r\n", "Host header"),
        ("GET http://api.test..:{port}/ HTTP/1.1\r\nHost: api.test..:{port}\r\n\r\n", "is not HOST:PORT"),
        ("GET http://api.test:{port}\\@evil.test/ HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n", "credentials"),
        ("GET http://[::ffff:7f00:1]:{port}/ HTTP/1.1\r\nHost: [::ffff:7f00:1]:{port}\r\n\r\n", "raw IP address"),
        ("GET http://[fe80::1%eth0]:{port}/ HTTP/1.1\r\nHost: [fe80::1%eth0]:{port}\r\n\r\n", "raw IP address"),
        ("GET http://0x7f.1:{port}/ HTTP/1.1\r\nHost: 0x7f.1:{port}\r\n\r\n", "raw IP address"),
        ("GET https://api.test:{port}/ HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n", "only absolute http://"),
        ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "only absolute http://"),
        ("GET http://api.test:{port}/ HTTP/1.1\r\nHost: api.test:{port}\r\nX: a\rHost: evil\r\n\r\n", "not valid HTTP"),
        ("CONNECT api.test:{port} HTTP/1.1\r\nHost: api.test:{port}\r\n\r\nCONNECT evil.test:80 HTTP/1.1\r\n\r\n", "does not start with a TLS ClientHello"),
    ],
)
async def test_spellings_and_smuggling_that_name_another_host_are_refused_before_any_upstream(
    tmp_path: Path, request_bytes: str, why: str
) -> None:
    with http_upstream() as seen:
        proxy = await running(
            tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1", "evil.test": "127.0.0.1"}}, reset_ok=True
        )
        await proxy.send(request_bytes.format(port=seen.port).encode())
        await proxy.proxy.close()
    assert seen.requests == []
    assert why in proxy.events[0].reason and not proxy.events[0].allowed


async def test_a_second_request_on_the_same_connection_never_reaches_any_host(tmp_path: Path) -> None:
    with http_upstream() as seen:
        target = f"api.test:{seen.port}"
        proxy = await running(tmp_path, {"allow": [target], "resolve": {"api.test": "127.0.0.1", "evil.test": "127.0.0.1"}}, reset_ok=True)
        answer = await proxy.send(
            get(f"http://{target}/one", target) + get(f"http://evil.test:{seen.port}/two", f"evil.test:{seen.port}")
            + get(f"http://{target}/three", target)
        )  # fmt: skip
        await proxy.proxy.close()
    assert answer.count(b"HTTP/1.1 ") == 1 and [path for path, _ in seen.requests] == ["/one"]


def _tls12_hello(server_hostname: str) -> bytes:
    """The ClientHello of a client that speaks TLS 1.2 only (no supported_versions, no key shares)."""
    context = ssl.create_default_context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


@pytest.mark.parametrize(
    "hello, reaches",
    [
        (_tls12_hello("api.test"), True),
        (_tls12_hello("evil.test"), False),
        (b"\x80\x2e\x01\x00\x02" + bytes(45), False),  # an SSLv2-compatible hello: no SNI to check
    ],
    ids=["tls1.2 same sni", "tls1.2 other sni", "sslv2 hello"],
)
async def test_tls_versions_are_held_to_the_same_sni_rule(tmp_path: Path, hello: bytes, reaches: bool) -> None:
    with tcp_recorder() as seen:
        target = f"api.test:{seen.port}"
        proxy = await running(tmp_path, {"allow": [target], "resolve": {"api.test": "127.0.0.1"}}, reset_ok=True)
        await proxy.send(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode(), then=hello)
        await proxy.proxy.close()
    assert (seen.raw == [hello]) if reaches else (seen.raw == [])
