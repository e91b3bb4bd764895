"""The backend protocol: what a sandbox backend is to the rest of coderoom.

A backend is one sub-package (`local/`, `docker/`) exposing a `backend` object of this shape,
registered by name (see `registry`). Nothing outside a backend's package knows its internals:
the CLI asks the backend for its help text, its preparation step and its own commands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import EXIT_TIMEOUT

if TYPE_CHECKING:  # the SDK only where sessions open; pydantic (the spec) not for --help
    from pydantic import BaseModel
    from agents.sandbox.session.sandbox_client import BaseSandboxClient

    from .core import Sandbox
    from .spec import SandboxSpec

Progress = Callable[[str], None]

# How a backend reports why a command ended, in the exit code of a plain `exec`:
# EXIT_TIMEOUT (124, as coreutils `timeout`): killed with its whole tree at `Limits.timeout`;
# EXIT_KILLED (137 = 128 + SIGKILL): SIGKILLed, which is how a cgroup OOM kill shows;
# anything else: the command's own status (128 + N for death by signal N).
EXIT_KILLED = 137
__all__ = ["EXIT_KILLED", "EXIT_TIMEOUT", "Progress", "SandboxBackend"]


# Optional on a backend: `plain_spec = True` says that `unavailable_reason`, `prepare` and `start`
# read nothing of the spec but `spec.backend` and the values of `spec.limits`, so the CLI's fast
# path (`coderoom sandbox run`) may hand them a spec made without pydantic: an object with
# `backend` and a `Limits` (pydantic-free itself), where `SandboxSpec` would also carry backend tables.
# And `prestart(spec)`: start the sandbox now, synchronously, before the caller loads asyncio;
# it returns None (then `start` does it all) or an object with `async finish() -> Sandbox` (in
# the event loop) and `abandon()` (remove it unused).
# And `run_plain(spec, argv)`, for the same kind of spec: run `argv` in a fresh sandbox and remove
# it, with neither asyncio nor the backend's client library; it returns a `core.CommandResult`,
# or None (nothing made) when the full path must run it.


@runtime_checkable
class SandboxBackend(Protocol):
    name: str
    isolates: bool  # False only for the SDK's unconfined backend, kept for comparison
    summary: str  # one line for --help
    leftovers: str  # what `prune` removes, singular: "sandbox container"

    def options_model(self) -> type[BaseModel]:
        """The pydantic model of its `[sandbox.<name>]` table (loaded on use: --help stays fast)."""

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        """None when the backend can run here, else a sentence saying why not and what to do."""

    def prepare(self, spec: SandboxSpec, progress: Progress) -> None:
        """Anything slow to do once before a session (Docker: build the image), with progress."""

    async def start(self, spec: SandboxSpec) -> Sandbox:
        """A started sandbox for `spec` through the SDK-free core (see `core`)."""

    def client(self, spec: SandboxSpec) -> tuple[BaseSandboxClient[Any], Any]:
        """An SDK sandbox client configured for `spec`, and the options for `client.create`."""

    def prune(self, skipped: list[str] | None = None) -> int:
        """Remove what crashed sessions of this backend left behind; how many were removed. What
        it had to leave (a hostile leftover that cannot be removed) is added to `skipped`, one
        terminal-safe line each, and never ends the prune of the others."""

    def info(self) -> str:
        """What enforces each limit on this machine, one `limit: how` line each (`sandbox info`)."""

    def commands(self) -> Any | None:
        """A typer app of this backend's own commands (mounted as `coderoom NAME ...`), or None."""
