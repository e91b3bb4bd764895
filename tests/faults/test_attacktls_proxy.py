"""TLS interception pass (2026-12-06), the proxy's side: what a sandbox can make a host with a
secret send back, or send where others see it. The test plays the sandbox on the proxy's Unix
socket (the bytes code inside can send); upstreams are on 127.0.0.1 only, reached through
`resolve` names."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from egress.proxyclient import SECRET, get, https_through, intercepting, running
from egress.upstreams import http_upstream, tcp_recorder

CANARY = "canary-attacktls-8c3e51a0"


def trace(target: str, host: str, method: str = "TRACE") -> bytes:
    return f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


@pytest.mark.parametrize("method", ["TRACE", "TRACK", "trace"])
async def test_a_request_the_server_reflects_whole_is_refused_for_a_host_with_a_secret_on_plain_http(tmp_path: Path, method: str) -> None:
    with http_upstream() as seen:
        target = f"api.test:{seen.port}"
        table = {"allow": [target], "resolve": {"api.test": "127.0.0.1"}, "secrets": [{**SECRET, "plain_http": True}]}
        proxy = await running(tmp_path, table, environ={"TOKEN": CANARY})
        answer = await proxy.send(trace(f"http://{target}/", target, method))
        await proxy.proxy.close()
    assert CANARY.encode() not in answer and seen.requests == []  # refused before anything went upstream
    assert answer.startswith(b"HTTP/1.1 403") and b"reflect" in answer, answer


async def test_a_request_the_server_reflects_whole_is_refused_inside_https_for_a_host_with_a_secret(tmp_path: Path) -> None:
    async with intercepting(tmp_path, CANARY) as (seen, proxy):
        assert proxy.proxy.ca is not None
        target = f"api.test:{seen.port}"
        answer, _ = await asyncio.to_thread(https_through, proxy, "api.test", seen.port, trace("/", target), pem=proxy.proxy.ca.pem())
    assert CANARY.encode() not in answer and seen.requests == []  # refused before anything went upstream
    assert answer.startswith(b"HTTP/1.1 403") and b"reflect" in answer, answer
    (event,) = proxy.events
    assert (event.method, event.allowed, event.intercepted) == ("TRACE", False, True)


async def test_trace_to_a_host_without_a_secret_is_the_hosts_business(tmp_path: Path) -> None:
    with http_upstream() as seen:
        target = f"other.test:{seen.port}"
        proxy = await running(tmp_path, {"allow": [target], "resolve": {"other.test": "127.0.0.1"}})
        answer = await proxy.send(trace(f"http://{target}/", target))
        await proxy.proxy.close()
    assert answer.startswith(b"HTTP/1.1 200") and b"TRACE / HTTP/1.1" in answer


async def test_a_sandbox_cannot_make_a_secret_cross_the_network_in_clear_text(tmp_path: Path) -> None:
    with tcp_recorder() as wire:  # what an observer on the path would read
        target = f"api.test:{wire.port}"
        proxy = await running(tmp_path, {"allow": [target], "resolve": {"api.test": "127.0.0.1"}, "secrets": [SECRET]}, environ={"TOKEN": CANARY})
        answer = await proxy.send(get(f"http://{target}/", target))
        await proxy.proxy.close()
    assert wire.raw == []  # refused before the proxy connected
    assert answer.startswith(b"HTTP/1.1 403") and b"only inside HTTPS" in answer and b"plain_http" in answer, answer
    (event,) = proxy.events
    assert (event.host, event.allowed) == ("api.test", False) and "clear text" in event.reason


async def test_a_secret_that_allows_plain_http_is_sent_there_as_its_owner_chose(tmp_path: Path) -> None:
    with tcp_recorder() as wire:
        target = f"api.test:{wire.port}"
        table = {"allow": [target], "resolve": {"api.test": "127.0.0.1"}, "secrets": [{**SECRET, "plain_http": True}]}
        proxy = await running(tmp_path, table, environ={"TOKEN": CANARY}, reset_ok=True)
        await proxy.send(get(f"http://{target}/", target))
        await proxy.proxy.close()
    assert [CANARY.encode() in sent for sent in wire.raw] == [True]
