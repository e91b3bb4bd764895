"""The host proxy on its own (egress.proxy): a test plays the sandbox on the Unix socket, upstream
servers run on 127.0.0.1 and are reached through `resolve` names. Nothing else is contacted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coderoom.egress.proxy import MAX_OPEN

from .proxyclient import get, running
from .upstreams import client_hello, http_upstream, tcp_recorder

CANARY = "canary-3f9a1c77e2"


@pytest.fixture
async def upstream() -> AsyncIterator[int]:
    with http_upstream() as seen:
        yield seen.port


async def test_an_allowed_host_is_reached_at_the_address_resolve_named(tmp_path: Path) -> None:
    with http_upstream() as seen:
        proxy = await running(tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}})
        answer = await proxy.send(get(f"http://api.test:{seen.port}/x?y=1", f"api.test:{seen.port}"))
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello from upstream\n")
    assert seen.requests[0][0] == "/x?y=1" and seen.requests[0][1]["host"] == f"api.test:{seen.port}"
    (event,) = proxy.events
    assert (event.host, event.port, event.allowed, event.address) == ("api.test", seen.port, True, "127.0.0.1")
    assert event.bytes_up > 0 and event.bytes_down > len(b"hello from upstream\n")


@pytest.mark.parametrize(
    "request_line, host, why",
    [
        ("http://other.test:{port}/", "other.test:{port}", "not in the allowlist"),
        ("http://127.0.0.1:{port}/", "127.0.0.1:{port}", "raw IP address"),
        ("http://2130706433:{port}/", "2130706433:{port}", "raw IP address"),
        ("http://[::1]:{port}/", "[::1]:{port}", "raw IP address"),
        ("http://api.test:{port}/", "other.test:{port}", "Host header"),
        ("http://api.test:1/", "api.test:1", "not in the allowlist"),
        ("/relative", "api.test:{port}", "only absolute http://"),
        ("http://user@api.test:{port}/", "api.test:{port}", "credentials"),
    ],
)
async def test_plain_http_refusals_name_why_and_send_nothing_upstream(
    tmp_path: Path, request_line: str, host: str, why: str
) -> None:
    with http_upstream() as seen:
        proxy = await running(tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}})
        answer = await proxy.send(get(request_line.format(port=seen.port), host.format(port=seen.port)))
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 403") and why.encode() in answer
    assert seen.requests == []
    (event,) = proxy.events
    assert not event.allowed and why in event.reason


async def test_a_name_that_resolves_to_loopback_is_refused_unless_resolve_named_it(tmp_path: Path) -> None:
    # `localhost` resolves on the host (to loopback): allowed by name, refused by address
    proxy = await running(tmp_path, {"allow": ["localhost:9"]})
    answer = await proxy.send(get("http://localhost:9/", "localhost:9"))
    await proxy.proxy.close()
    assert b"403" in answer and b"loopback" in answer and b"only `resolve`" in answer


async def test_the_secret_is_added_on_the_bound_host_only_and_a_sandbox_copy_is_replaced(tmp_path: Path) -> None:
    with http_upstream() as seen:
        table = {
            "allow": [f"api.test:{seen.port}", f"other.test:{seen.port}"],
            "resolve": {"api.test": "127.0.0.1", "other.test": "127.0.0.1"},
            "secrets": [{"host": "api.test", "header": "Authorization", "env": "TOKEN", "format": "Bearer {}", "plain_http": True}],
        }
        proxy = await running(tmp_path, table, environ={"TOKEN": CANARY})
        fake = "Authorization: Bearer from-the-sandbox\r\n"
        bound = await proxy.send(get(f"http://api.test:{seen.port}/", f"api.test:{seen.port}", fake))
        other = await proxy.send(get(f"http://other.test:{seen.port}/", f"other.test:{seen.port}"))
        await proxy.proxy.close()
    assert bound.startswith(b"HTTP/1.1 200") and other.startswith(b"HTTP/1.1 200")
    assert seen.requests[0][1]["authorization"] == f"Bearer {CANARY}"
    assert "authorization" not in seen.requests[1][1]
    assert CANARY.encode() not in bound + other
    assert all(CANARY not in repr(event.fields()) for event in proxy.events)


async def test_a_secret_whose_variable_is_unset_refuses_rather_than_sending_without_it(tmp_path: Path) -> None:
    with http_upstream() as seen:
        table = {
            "allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"},
            "secrets": [{"host": "api.test", "header": "X-Key", "env": "UNSET_TOKEN", "plain_http": True}],
        }  # fmt: skip
        proxy = await running(tmp_path, table)
        answer = await proxy.send(get(f"http://api.test:{seen.port}/", f"api.test:{seen.port}"))
        await proxy.proxy.close()
    assert b"403" in answer and b"UNSET_TOKEN is not set" in answer and seen.requests == []


async def test_connect_with_the_matching_sni_reaches_the_resolved_address(tmp_path: Path) -> None:
    with tcp_recorder() as seen:
        proxy = await running(tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}})
        hello = client_hello("api.test")
        answer = await proxy.send(f"CONNECT api.test:{seen.port} HTTP/1.1\r\nHost: api.test:{seen.port}\r\n\r\n".encode(), then=hello)
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 200")
    assert seen.raw == [hello]
    (event,) = proxy.events
    assert event.allowed and event.bytes_up == len(hello) and event.method == "CONNECT"


@pytest.mark.parametrize(
    "target, hello_for, why",
    [
        ("other.test:{port}", "other.test", "not in the allowlist"),
        ("api.test:{port}", "evil.test", "is not the CONNECT host"),
        ("api.test:{port}", None, "is not the CONNECT host"),
        ("127.0.0.1:{port}", "api.test", "raw IP address"),
    ],
)
async def test_connect_refusals(tmp_path: Path, target: str, hello_for: str | None, why: str) -> None:
    with tcp_recorder() as seen:
        proxy = await running(tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}})
        target = target.format(port=seen.port)
        await proxy.send(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode() + client_hello(hello_for))
        await proxy.proxy.close()
    assert seen.raw == []
    (event,) = proxy.events
    assert not event.allowed and why in event.reason


async def test_a_chained_connect_inside_the_tunnel_is_not_tls_and_is_refused(tmp_path: Path) -> None:
    with tcp_recorder() as seen:
        proxy = await running(tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}})
        first = f"CONNECT api.test:{seen.port} HTTP/1.1\r\nHost: api.test:{seen.port}\r\n\r\n".encode()
        await proxy.send(first, then=b"CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n")
        await proxy.proxy.close()
    assert seen.raw == []
    assert "does not start with a TLS ClientHello" in proxy.events[0].reason


async def test_an_oversized_request_head_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    proxy = await running(tmp_path, {"allow": ["api.test:80"], "resolve": {"api.test": "127.0.0.1"}})
    answer = await proxy.send(b"GET http://api.test/ HTTP/1.1\r\nHost: api.test\r\nX: " + b"a" * 100_000 + b"\r\n\r\n")
    await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 400")


async def test_the_byte_budget_cuts_the_connection_and_is_named(tmp_path: Path) -> None:
    with http_upstream() as seen:
        proxy = await running(
            tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}}, max_bytes=100_000
        )
        answer = await proxy.send(get(f"http://api.test:{seen.port}/big?n=1000000", f"api.test:{seen.port}"))
        later = await proxy.send(get(f"http://api.test:{seen.port}/", f"api.test:{seen.port}"))
        await proxy.proxy.close()
    assert len(answer) < 1_000_000
    assert "egress_bytes budget" in proxy.events[0].reason
    assert b"403" in later and b"egress_bytes budget" in later


async def test_the_connection_limit_refuses_the_next_connection_by_name(tmp_path: Path) -> None:
    with http_upstream() as seen:
        proxy = await running(
            tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}}, max_connections=2
        )
        answers = [await proxy.send(get(f"http://api.test:{seen.port}/", f"api.test:{seen.port}")) for _ in range(3)]
        await proxy.proxy.close()
    assert [a[:12] for a in answers] == [b"HTTP/1.1 200", b"HTTP/1.1 200", b"HTTP/1.1 403"]
    assert b"egress_connections limit of 2" in answers[2]
    assert len(seen.requests) == 2


async def test_a_socket_left_by_a_killed_proxy_is_replaced_and_close_removes_it(tmp_path: Path) -> None:
    stale = tmp_path / "proxy.sock"
    stale.write_bytes(b"")
    proxy = await running(tmp_path, {"allow": ["api.test"]})
    assert stale.is_socket()
    await proxy.proxy.close()
    assert not stale.exists()


async def test_connections_open_at_once_are_bounded_and_freed_when_they_end(tmp_path: Path) -> None:
    proxy = await running(tmp_path, {"allow": ["api.test:80"], "resolve": {"api.test": "127.0.0.1"}})
    idle = [await asyncio.open_unix_connection(str(proxy.proxy.socket_path)) for _ in range(MAX_OPEN)]
    reader, writer = await asyncio.open_unix_connection(str(proxy.proxy.socket_path))
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed unanswered: no descriptor held for it
    writer.close()
    await asyncio.sleep(0.05)
    assert [event.reason for event in proxy.events] == [f"{MAX_OPEN} connections are open already: later ones are closed unanswered"]
    for _, writer in idle:
        writer.close()
    await asyncio.sleep(0.2)
    assert proxy.proxy.budget.open == 0
    await proxy.proxy.close()


async def test_a_redirect_to_a_refused_host_is_the_clients_to_follow_and_is_refused_then(tmp_path: Path) -> None:
    with http_upstream(redirect_to="http://other.test/") as seen:
        proxy = await running(tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}})
        first = await proxy.send(get(f"http://api.test:{seen.port}/go", f"api.test:{seen.port}"))
        followed = await proxy.send(get("http://other.test/", "other.test"))
        await proxy.proxy.close()
    assert first.startswith(b"HTTP/1.1 302") and b"location: http://other.test/" in first.lower()
    assert b"403" in followed and [path for path, _ in seen.requests] == ["/go"]


@pytest.mark.parametrize("value", [f"{CANARY}\r\nX-Injected: 1", f"{CANARY}\x00", f"{CANARY}é"])
async def test_a_secret_a_header_cannot_hold_is_refused_without_showing_it(tmp_path: Path, value: str) -> None:
    with http_upstream() as seen:
        table = {
            "allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"},
            "secrets": [{"host": "api.test", "header": "X-Key", "env": "TOKEN", "plain_http": True}],
        }  # fmt: skip
        proxy = await running(tmp_path, table, environ={"TOKEN": value})
        answer = await proxy.send(get(f"http://api.test:{seen.port}/", f"api.test:{seen.port}"))
        await proxy.proxy.close()
    assert b"403" in answer and CANARY.encode() not in answer and seen.requests == []
    assert CANARY not in repr(proxy.events[0].fields())


async def test_headers_the_sandbox_names_in_connection_stay_on_its_hop(tmp_path: Path) -> None:
    """A proxy drops what `Connection` names (RFC 9110 7.6.1); the body's framing stays h11's."""
    with http_upstream() as seen:
        proxy = await running(tmp_path, {"allow": [f"api.test:{seen.port}"], "resolve": {"api.test": "127.0.0.1"}})
        hop = "Connection: keep-alive, X-Hop-State, Content-Length\r\nX-Hop-State: 1\r\nX-End: 2\r\n"
        answer = await proxy.send(get(f"http://api.test:{seen.port}/", f"api.test:{seen.port}", hop))
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"hello from upstream\n")
    headers = seen.requests[0][1]
    assert "x-hop-state" not in headers and headers["x-end"] == "2"
