"""Backends by name, and the one way to open a session: always closed and deleted.

A backend is any object with a `name`, an `unavailable_reason()` and a `client(spec)` that
returns an SDK `BaseSandboxClient` plus its options. Adding a backend means adding one module
and one line to `_BUILTIN`.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

from agents.sandbox import Manifest
from agents.sandbox.session.sandbox_client import BaseSandboxClient
from agents.sandbox.session.sandbox_session import SandboxSession

from .spec import SandboxSpec


class SandboxUnavailable(RuntimeError):
    """The requested backend cannot run here; the message says why and what to do."""


class SandboxBackend(Protocol):
    name: str

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        """None when the backend can run here, else a sentence saying why not and what to do."""

    def client(self, spec: SandboxSpec) -> tuple[BaseSandboxClient[Any], Any]:
        """An SDK sandbox client configured for `spec`, and the options for `client.create`."""


_BUILTIN = {
    "local": "coderoom.sandboxes.local:backend",
    "docker": "coderoom.sandboxes.docker:backend",
    "unix_local": "coderoom.sandboxes.unconfined:backend",
}


def backend_names() -> list[str]:
    return list(_BUILTIN)


def get_backend(name: str) -> SandboxBackend:
    try:
        target = _BUILTIN[name]
    except KeyError:
        raise SandboxUnavailable(
            f"unknown sandbox backend {name!r}; choose one of: {', '.join(_BUILTIN)}"
        ) from None
    module_name, attribute = target.split(":")
    return getattr(importlib.import_module(module_name), attribute)


@asynccontextmanager
async def open_session(
    spec: SandboxSpec, manifest: Manifest | None = None
) -> AsyncIterator[SandboxSession]:
    """Create and start a session; on exit (success, error or Ctrl-C) close and delete it."""
    backend = get_backend(spec.backend)
    reason = backend.unavailable_reason(spec)
    if reason is not None:
        raise SandboxUnavailable(reason)
    client, options = backend.client(spec)
    session = await client.create(manifest=manifest or Manifest(), options=options)
    try:
        await session.start()
        yield session
    finally:
        await asyncio.shield(_close_and_delete(client, session))


async def _close_and_delete(client: BaseSandboxClient[Any], session: SandboxSession) -> None:
    try:
        await session.aclose()
    finally:
        await client.delete(session)
