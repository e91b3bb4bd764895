"""The one way to open an SDK sandbox session: created, started, and always closed and deleted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agents.sandbox import Manifest
from agents.sandbox.session.sandbox_client import BaseSandboxClient
from agents.sandbox.session.sandbox_session import SandboxSession

from ..errors import SandboxUnavailable
from ..interrupts import finish_uncancelled
from .base import SandboxBackend
from .registry import backend_for
from .spec import SandboxSpec


@asynccontextmanager
async def open_session(
    spec: SandboxSpec, manifest: Manifest | None = None, *, unconfined_no_isolation: bool = False,
    backend: SandboxBackend | None = None,
) -> AsyncIterator[SandboxSession]:
    """Create and start a session; on exit (success, error, a signal) close and delete it.
    `backend`: the object to use instead of the registry's (see `registry.backend_for`).

    The close runs to its end even when a second signal cancels the run again.
    """
    backend = backend_for(spec, backend, unconfined_no_isolation=unconfined_no_isolation)
    reason = backend.unavailable_reason(spec)
    if reason is not None:
        raise SandboxUnavailable(reason)
    client, options = backend.client(spec)
    # A signal during create must not orphan what create made (a session folder, a container)
    creating = asyncio.ensure_future(client.create(manifest=manifest or Manifest(), options=options))
    try:
        session = await finish_uncancelled(creating)
    except asyncio.CancelledError:
        if creating.done() and not creating.cancelled() and creating.exception() is None:
            await finish_uncancelled(_close_and_delete(client, creating.result()))
        raise
    try:
        await session.start()
        yield session
    finally:
        await finish_uncancelled(_close_and_delete(client, session))


async def _close_and_delete(client: BaseSandboxClient[Any], session: SandboxSession) -> None:
    try:
        await session.aclose()
    finally:
        await client.delete(session)
