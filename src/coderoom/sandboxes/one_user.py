"""The command policy both coderoom sessions share: one unprivileged sandbox user, plain `sh -c`.

Plain functions rather than a mixin: the docker client re-classes SDK sessions in place, which a
mixin's different object layout forbids.
"""

from __future__ import annotations

from agents.sandbox.types import User


def plain_shell(shell: bool | list[str], user: str | User | None, backend: str) -> bool | list[str]:
    """`sh -c` instead of the SDK's login shell, so no start-up file one command wrote runs in the
    next (catalogue SES-02); any other user is refused."""
    if user is not None:
        raise ValueError(f"the {backend} sandbox runs every command as its one sandbox user")
    return ["sh", "-c"] if shell is True else shell
