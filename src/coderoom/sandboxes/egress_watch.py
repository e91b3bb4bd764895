"""How a run hears of its sandbox's egress: each connection attempt through the allowlist's
proxy (`coderoom.egress`), for the record. A backend session without an allowlist, or of a
backend that has none yet, reports nothing."""

from __future__ import annotations

from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

from ..egress.session import EgressListener, ReportsEgress
from .sdk_session_adapter import backend_session


def watch_egress(session: BaseSandboxSession, listener: EgressListener) -> None:
    """Hand each later egress attempt of a started SDK session's sandbox to `listener`."""
    inner = backend_session(session)
    if isinstance(inner, ReportsEgress):
        inner.watch_egress(listener)
