"""What a backend needs to give one sandbox session its allowlist: the proxy, the forwarder's
command line and the environment that points programs at it.

The proxy (`proxy.Proxy`) runs in the host process, in the session's event loop, for as long as
the session: the backend starts it before the sandbox and stops it on close. A host process that
is killed takes it along; the socket file it leaves in the session folder is replaced by the
next start (`Proxy.start`) or removed with the folder (`sandbox prune`).

With secrets, the proxy terminates HTTPS to their hosts (`interception`): `start` writes the
trust bundle (the system roots plus the session's CA certificate) beside the socket, as
BUNDLE_NAME, and `sandbox_env(bundle=...)` names it to every TLS client that reads a variable.
The proxy's own trust for upstreams is the default store plus, only from the host's environment
(UPSTREAM_CA_ENV, never the sandbox, a job file or a record), one more CA file: how tests reach
loopback HTTPS servers with a certificate of their own.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..errors import SandboxFailed
from .rules import Policy

if TYPE_CHECKING:  # the proxy (ssl, h11) loads with the first allowlisted session, not with every backend
    from .proxy import Attempt

BUNDLE_NAME = "ca-bundle.pem"  # beside the proxy's socket: the trust roots of an intercepting session
UPSTREAM_CA_ENV = "CODEROOM_EGRESS_UPSTREAM_CA"  # host only: a PEM file the proxy trusts for upstreams too
# Every variable a common TLS client reads for its trust roots (the bundle keeps the system's).
_BUNDLE_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS")
FORWARDER_PORT = 3128  # inside the sandbox's own network namespace: no other program's port
EgressListener = Callable[[dict[str, object]], None]


@runtime_checkable
class ReportsEgress(Protocol):
    """A sandbox (or a backend's SDK session) that may run an egress proxy: `watch_egress` hands
    each later attempt to a listener (nothing without an allowlist)."""

    def watch_egress(self, listener: EgressListener) -> None: ...


def sandbox_env(port: int = FORWARDER_PORT, *, bundle: str | None = None) -> dict[str, str]:
    """The environment every command of an allowlisted sandbox gets: the proxy for every
    protocol and tool that reads one (curl, requests, pip, urllib, git), loopback left direct;
    with `bundle` (the sandbox's path of BUNDLE_NAME, when the policy has secrets), the trust
    roots that include the session's CA."""
    url = f"http://127.0.0.1:{port}"
    direct = "localhost,127.0.0.1,::1"
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")}
    trust = {name: bundle for name in _BUNDLE_VARIABLES} if bundle is not None else {}
    return {**env, "NO_PROXY": direct, "no_proxy": direct, "PIP_PROXY": url, **trust}


def bundle_path(policy: Policy, folder: str) -> str | None:
    """Where the sandbox finds BUNDLE_NAME in `folder` (its view of the socket's folder), or
    None when the policy has no secret (nothing is intercepted, the system roots serve)."""
    return f"{folder}/{BUNDLE_NAME}" if policy.secrets else None


def forwarder_source() -> str:
    """The forwarder's source (`inside/forwarder.py`): the local backend runs it as a command,
    the Docker backend's init.py as a child of its own."""
    return files("coderoom.egress.inside").joinpath("forwarder.py").read_text(encoding="utf-8")


def forwarder_command(python: str, socket_path: str, port: int = FORWARDER_PORT) -> list[str]:
    """The forwarder (`inside/forwarder.py`) as a command for the sandbox's `python`."""
    return [python, "-I", "-c", forwarder_source(), socket_path, str(port)]


class EgressSession:
    """The proxy of one sandbox session, with its budget and whoever listens to its events."""

    def __init__(
        self, policy: Policy, socket_path: Path, *, max_bytes: int, max_connections: int,
        host_environ: Mapping[str, str] = os.environ,
    ) -> None:  # fmt: skip
        from .proxy import Budget, Proxy

        self._listeners: list[EgressListener] = []
        upstream_ca = host_environ.get(UPSTREAM_CA_ENV)
        self.proxy: Proxy = Proxy(
            policy, socket_path, Budget(max_bytes, max_connections), self._report,
            upstream_cafile=Path(upstream_ca) if upstream_ca else None,
        )  # fmt: skip

    def watch(self, listener: EgressListener) -> None:
        """Hand every later attempt to `listener` (a run's record: `lifecycle`)."""
        self._listeners.append(listener)

    def _report(self, attempt: Attempt) -> None:
        fields = attempt.fields()
        for listener in list(self._listeners):
            listener(fields)

    async def start(self, *, system_roots: bytes | None = None) -> None:
        """Listen on the socket, and with secrets write the bundle: `system_roots` (the
        sandbox's own, when the backend read them: Docker's image) or the host's, plus the
        session CA. A host error (the folder gone, no descriptors) is SandboxFailed."""
        try:
            await self.proxy.start()
            if self.proxy.ca is not None:
                from .interception import system_bundle, write_bundle

                bundle = self.proxy.socket_path.parent / BUNDLE_NAME
                roots = system_roots if system_roots is not None else system_bundle()
                await asyncio.to_thread(write_bundle, bundle, self.proxy.ca, roots)
        except OSError as exc:
            raise SandboxFailed(f"cannot start the egress proxy: {exc}") from exc

    async def close(self) -> None:
        await self.proxy.close()
