"""The adapter over the Agents SDK's `SandboxSession` wrapper: the one module that reads its
private `_inner`.

Why one: the SDK hands a run (and a client's `create`) a `SandboxSession` that wraps the
backend's own session, and a few facts live only on the backend's session: the limits its
commands ran into, whether it keeps processes between commands, what a client's `delete` must
close, whether it runs host helpers out of sandbox code's reach. An SDK release that renames the
attribute then breaks here, and only here.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.types import ExecResult

from .pty_sessions import PtySessions


def backend_session(session: BaseSandboxSession) -> BaseSandboxSession:
    """The backend's own session under the SDK's wrapper; `session` itself when not wrapped."""
    return session._inner if isinstance(session, SandboxSession) else session


def limits_hit(session: BaseSandboxSession) -> list[str]:
    """The limits a session's commands ran into (a coderoom backend's `limits_hit` log; none
    for a session of another kind, such as the SDK's unconfined unix_local)."""
    inner = backend_session(session)
    return list(inner.limits_hit) if isinstance(inner, PtySessions) else []


@runtime_checkable
class RunsHostHelpers(Protocol):
    """A backend session that runs a host helper command where sandbox code cannot signal,
    trace or stop it, with a deadline (docker's, as another uid)."""

    async def exec_helper(self, *argv: str, reply_bytes: int) -> ExecResult: ...


def host_helpers(session: BaseSandboxSession) -> RunsHostHelpers | None:
    """The backend's session if it runs host helpers (`RunsHostHelpers`), else None."""
    inner = backend_session(session)
    return inner if isinstance(inner, RunsHostHelpers) else None
