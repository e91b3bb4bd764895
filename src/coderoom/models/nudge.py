"""The message a run sends its model when required outputs are missing or invalid (a nudge).

Why here, in the model layer: the run sends it, and the offline analyst must tell it from a
follow-up request (a nudge asks it to finish the same job; a follow-up is a new request it may
have to refuse), so both read the one text from this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

NUDGE_HEAD = "The run is not finished: these required outputs are missing or invalid:"


class Problem(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def detail(self) -> str: ...


def nudge_message(problems: Sequence[Problem]) -> str:
    lines = "\n".join(f"- {c.path}: {c.detail}" for c in problems)
    return f"{NUDGE_HEAD}\n{lines}\nCreate or fix them in the workspace, then reply with a short summary."


def is_nudge(text: str) -> bool:
    return text.startswith(NUDGE_HEAD)
