"""The driver's own calls on an actor whose handle it hands to nodes (`cluster.progress.ProgressBox`,
`batch.on_node.AttemptLog`).

Why: those actors bound what a node may leave in them by the places the driver opens for its own
jobs and sessions, but a Ray actor handle exposes every method of the actor, so a node could call
`open` itself: places of its own making pushed a running session's out and held 2 GiB of reports
on the server's node, or any number of attempt logs (attack R-F9, R-F10). So `open` (and
`close`) take a token that only the driver has: the actor makes it at the first `claim`, which
the driver calls before it hands the handle to any node; any later `claim` gets nothing.
"""

from __future__ import annotations

import secrets
from typing import Any


class DriverOnly:
    """A mixin for such an actor: `claim` once, then `_from_driver(token)` in its driver-only methods."""

    _token: str | None = None

    def claim(self) -> str | None:
        """The driver's token, to the first caller alone (the driver, before any node has the handle)."""
        if self._token is not None:
            return None
        self._token = secrets.token_hex(16)
        return self._token

    def _from_driver(self, token: object) -> bool:
        return self._token is not None and isinstance(token, str) and secrets.compare_digest(token, self._token)


def claimed(handle: Any) -> Any:
    """The driver's `claim` on the Ray actor `handle`, sent as soon as it is made (before the
    handle goes to any node); a reference to the token, which Ray resolves when it is passed to
    `open` or `close`, so nothing waits for it here."""
    return handle.claim.remote()
