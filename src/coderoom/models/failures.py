"""What can go wrong with a model request, shared by the request guard, the retry policy and the
error explanations: the exceptions, which answers are never worth a retry, and bounding what a
server said. A leaf module, so those three never import each other."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..errors import RunFailed

Notify = Callable[..., Any]  # records an event: notify("model_retry", attempt=..., ...)


class ModelAnswerError(RunFailed):
    """The model server's answer could not be used: it was not a readable completion."""


class ModelDeadlineExceeded(ModelAnswerError):
    """One request took longer than the whole-request deadline (retried like a timeout)."""


class ContextTooSmall(RunFailed):
    """Even the smallest form of the next request does not fit the model's context window."""


# Statuses that mean "this request is wrong": sending it again gets the same answer.
REQUEST_IS_WRONG = frozenset({400, 401, 403, 404, 413, 422})
RETRYABLE = frozenset({408, 409, 429})
# 5xx bodies that are really about the request (llama.cpp answers these with 500).
WRONG_REQUEST_REASON = re.compile(
    r"exceeds the available context size|context length|context size|too many tokens"
    r"|failed to parse tool call|parse tool call arguments|invalid (json|tool)",
    re.IGNORECASE,
)


def one_line(text: str, limit: int = 500) -> str:
    """`text` on one line, at most `limit` characters (server text is hostile and unbounded)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
