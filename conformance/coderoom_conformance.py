"""pytest plugin (`-p coderoom_conformance`) that runs the Agents SDK's own sandbox tests against a
coderoom backend by swapping one thing: the construction of the SDK's UnixLocal client and session.

`CODEROOM_CONFORMANCE_BACKEND` names the backend (`local`, `docker`); empty or unset leaves the
SDK's UnixLocal in place (the baseline). `CODEROOM_CONFORMANCE_REPORT` is the JSON file written at
the end: for each test, its outcome, the first line of its failure, and whether it built a real
UnixLocal client or session (`UnixLocalSandboxClient(...)` / `UnixLocalSandboxSession(...)` of
exactly that class: the SDK's fakes that subclass them do not count). That is how the runner
selects the tests in scope: those that build one in the baseline run.

The swap patches `__new__` of the two SDK classes, so every way a test names them (`from
agents.sandbox.sandboxes import ...`, module attributes, `from_state`) is covered and no test
module or assertion is touched:

* `UnixLocalSandboxClient(...)` returns the backend's client from `backend.client(spec)` (default
  limits). The only UnixLocal arguments carried over are `instrumentation` and `dependencies`,
  which every client takes; `inherit_host_environment` and its allowlist are UnixLocal's own (a
  coderoom sandbox never inherits the host environment). `create(options=...)` gets the
  backend's own options in place of None or UnixLocal's, with their `exposed_ports`.
* `UnixLocalSandboxSession(state=...)` returns the inner session of that client's
  `create(manifest=state.manifest, snapshot=state.snapshot)`, made in a worker thread because a
  constructor cannot await. Its resources are the backend's to release when the test closes the
  session; what a test leaves open is removed by `backend.prune()` after the run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import ipaddress
import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

BACKEND_ENV = "CODEROOM_CONFORMANCE_BACKEND"
REPORT_ENV = "CODEROOM_CONFORMANCE_REPORT"

_built = False  # whether the running test built a real UnixLocal client or session
_results: dict[str, dict[str, Any]] = {}


def _mark_built() -> None:
    global _built
    _built = True


def pytest_configure(config: pytest.Config) -> None:
    _loopback_only()
    from agents.sandbox.sandboxes import unix_local

    name = os.environ.get(BACKEND_ENV, "")
    factory = _Factory(name) if name else None

    def client_new(cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls is unix_local.UnixLocalSandboxClient:
            _mark_built()
            if factory is not None:
                return factory.client(**kwargs)
        return object.__new__(cls)

    def session_new(cls: type, *args: Any, **kwargs: Any) -> Any:
        if cls is unix_local.UnixLocalSandboxSession:
            _mark_built()
            if factory is not None:
                return factory.session(*args, **kwargs)
        return object.__new__(cls)

    unix_local.UnixLocalSandboxClient.__new__ = client_new  # type: ignore[method-assign]
    unix_local.UnixLocalSandboxSession.__new__ = session_new  # type: ignore[method-assign]


def _loopback_only() -> None:
    """Refuse, in this process, any connection or datagram to an address that is not loopback, and
    any name lookup but `localhost`: the SDK's tests are meant to need no network, and this run
    must not reach one even if a test tried (commands run inside a coderoom sandbox have none)."""

    def allowed(address: Any) -> bool:
        if isinstance(address, (str, bytes)):  # AF_UNIX: the Docker engine's socket, pipes
            return True
        host = address[0]
        try:
            return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
        except ValueError:
            return host == "localhost"

    def guard(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def checked(sock: socket.socket, address: Any, *args: Any) -> Any:
            target = args[-1] if method.__name__ == "sendto" and args else address
            if not allowed(target):
                raise PermissionError(f"coderoom conformance: no network beyond loopback ({target!r})")
            return method(sock, address, *args)

        return checked

    for name in ("connect", "connect_ex", "sendto"):
        setattr(socket.socket, name, guard(getattr(socket.socket, name)))
    lookup = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not allowed((host.decode() if isinstance(host, bytes) else str(host), 0)):
            raise socket.gaierror(socket.EAI_NONAME, f"coderoom conformance: no lookup of {host!r}")
        return lookup(host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]


class _Factory:
    """Builds the chosen backend's clients and sessions where a test builds UnixLocal ones."""

    def __init__(self, name: str) -> None:
        from coderoom.sandboxes.registry import get_backend
        from coderoom.sandboxes.spec import SandboxSpec

        self.backend = get_backend(name)
        self.spec = SandboxSpec(backend=name)
        reason = self.backend.unavailable_reason(self.spec)
        if reason:
            raise pytest.UsageError(f"coderoom backend {name!r} cannot run here: {reason}")

    def client(self, *, instrumentation: Any = None, dependencies: Any = None, **unix_local_only: Any) -> Any:
        client, default_options = self.backend.client(self.spec)
        client.__class__ = _swapped_class(type(client))
        client._conformance_default_options = default_options
        client._conformance_instrumentation = instrumentation
        if dependencies is not None:
            client._dependencies = dependencies
        return client

    def session(self, *, state: Any) -> Any:
        client = self.client()
        options = _options_with_ports(None, state.exposed_ports)
        create = client.create(manifest=state.manifest, snapshot=state.snapshot, options=options)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, create).result()._inner


def _options_with_ports(options: Any, ports: tuple[int, ...]) -> Any:
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClientOptions

    return UnixLocalSandboxClientOptions(exposed_ports=ports) if ports else options


_SWAPPED: dict[type, type] = {}


def _swapped_class(base: type) -> type:
    """`base` with UnixLocal's create options turned into the backend's, and the test's
    instrumentation (if any) on every session it wraps."""
    if base in _SWAPPED:
        return _SWAPPED[base]

    class Swapped(base):  # type: ignore[valid-type, misc]
        supports_default_options = True  # as UnixLocal's: the backend's own options stand in for None

        async def create(self, *, snapshot: Any = None, manifest: Any = None, options: Any = None) -> Any:
            return await super().create(snapshot=snapshot, manifest=manifest, options=self._backend_options(options))

        def _backend_options(self, options: Any) -> Any:
            from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClientOptions

            default = self._conformance_default_options
            if options is not None and not isinstance(options, UnixLocalSandboxClientOptions):
                return options
            ports = options.exposed_ports if options is not None else ()
            if default is None:
                return options  # a backend with no options of its own sees the test's
            if ports and "exposed_ports" in type(default).model_fields:
                return default.model_copy(update={"exposed_ports": ports})
            return default

        def _wrap_session(self, inner: Any, *, instrumentation: Any = None) -> Any:
            return super()._wrap_session(inner, instrumentation=instrumentation or self._conformance_instrumentation)

    Swapped.__name__ = Swapped.__qualname__ = base.__name__
    _SWAPPED[base] = Swapped
    return Swapped


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    global _built
    _built = False


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "message": "", "built": False})
    if report.failed:
        if entry["outcome"] != "failed":
            entry["message"] = _first_line(report)
        entry["outcome"] = "failed"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        entry["message"] = _first_line(report)
    if report.when == "teardown":
        entry["built"] = _built


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _results[report.nodeid] = {"outcome": "collect-error", "message": _first_line(report), "built": False}


def _first_line(report: pytest.BaseReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        text = str(crash.message)
    elif isinstance(report.longrepr, tuple):  # a skip: (path, line, reason)
        text = str(report.longrepr[2])
    else:
        text = str(report.longrepr)
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = os.environ.get(REPORT_ENV)
    if path:
        Path(path).write_text(json.dumps({"backend": os.environ.get(BACKEND_ENV) or "unix_local", "tests": _results}, indent=1))
