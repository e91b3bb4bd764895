"""The one way to open an SDK sandbox session: created, started, and always closed and deleted.

`open_session` is an `async with` block; `HeldSession` holds the same block open across awaits
(a run's lifecycle, a live session, the warm pool) until its `aclose`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

from agents.sandbox import Manifest
from agents.sandbox.session.sandbox_client import BaseSandboxClient
from agents.sandbox.session.sandbox_session import SandboxSession

from ..errors import SandboxUnavailable
from ..interrupts import finish_uncancelled
from ..workspace import fresh_manifest
from .base import SandboxBackend
from .registry import backend_for
from .spec import SandboxSpec

Held = TypeVar("Held", bound="HeldSession")


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


class HeldSession:
    """A started session (`session`) from `open_session`, held open outside an `async with`
    block and closed (and deleted) exactly once by `aclose`, from whichever task ends it."""

    def __init__(self, spec: SandboxSpec, session: SandboxSession, stack: AsyncExitStack) -> None:
        self.spec = spec
        self.session = session
        self._stack = stack
        self._closed = False

    @classmethod
    async def start(cls: type[Held], spec: SandboxSpec, backend: SandboxBackend | None = None) -> Held:
        """`backend`: an object to use instead of the registry's (tests hand in the fake). The
        workspace starts as every new one does (`workspace.fresh_manifest`: an empty output/)."""
        stack = AsyncExitStack()
        try:
            session = await stack.enter_async_context(open_session(spec, fresh_manifest(), backend=backend))
        except BaseException:
            await finish_uncancelled(stack.aclose())
            raise
        return cls(spec, session, stack)

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Close and delete the session, to its end even when the caller is cancelled meanwhile."""
        if self._closed:
            return
        self._closed = True
        await finish_uncancelled(self._stack.aclose())
