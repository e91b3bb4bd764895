"""What can go wrong with a model request, shared by the request guard, the retry policy and the
error explanations: the exceptions, which answers are never worth a retry, and bounding what a
server said. A leaf module, so those three never import each other."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any, Literal

import httpx2 as httpx  # the HTTP library of the openai client
import openai

from ..errors import RunFailed

Notify = Callable[..., Any]  # records an event: notify("model_retry", attempt=..., ...)


class ModelAnswerError(RunFailed):
    """The model server's answer could not be used: it was not a readable completion."""


class ModelDeadlineExceeded(ModelAnswerError):
    """One request took longer than the whole-request deadline. Not retried: the server was
    generating, and the same request would run into the same deadline (a local model once spent
    50 minutes on one turn resending a 600 s generation)."""


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


DEADLINE_ADVICE = (
    "not retried (the same request would take as long): raise CODEROOM_MODEL_TIMEOUT if the "
    "server is just slow, or lower --max-tokens"
)
FailureKind = Literal["unreachable", "deadline", "other"]


def failure_kind(error: BaseException) -> FailureKind:
    """What a failed request says about the server, from the whole exception chain.

    "unreachable": no connection was made (refused, no route, connect timeout): worth one quick
    retry at most, since a server that is not listening will not be in 30 s either.
    "deadline": the server took the request and ran out of time while answering: sending it
    again repeats the same generation into the same deadline.
    """
    chain = list(_chain(error))
    if any(isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout)) for e in chain):
        return "unreachable"
    timeouts = (ModelDeadlineExceeded, TimeoutError, httpx.TimeoutException, openai.APITimeoutError)
    if any(isinstance(e, timeouts) for e in chain):
        return "deadline"
    return "other"


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def one_line(text: str, limit: int = 500) -> str:
    """`text` on one line, at most `limit` characters (server text is hostile and unbounded)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
