"""Provider errors as one line a user can act on: bad key, unknown model, unreachable server.

The runner calls `explain_model_error` on whatever a run raised; None means "not a model error".
Nothing here echoes a key: a 401's body (which may quote part of the key) is left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai

from .failures import one_line

_KEYS = "check OPENAI_API_KEY (OpenAI) or OPENAI_COMPATIBLE_API_KEY (openai-compatible servers)"
_RETRIES = "after retries (CODEROOM_MODEL_MAX_RETRIES, CODEROOM_MODEL_TIMEOUT)"


def explain_model_error(exc: BaseException) -> str | None:
    """One line for a model error (an `openai` client error or coderoom's own `ModelAnswerError`)
    anywhere in `exc`'s chain or group, else None."""
    from .failures import ContextTooSmall, ModelAnswerError

    for error in _chain(exc):
        if isinstance(error, (ModelAnswerError, ContextTooSmall)):
            return error.message
        if isinstance(error, openai.APIError):
            return _explain(error)
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(reversed(current.exceptions))
        todo.extend(e for e in (current.__context__, current.__cause__) if e is not None)


def _explain(error: openai.APIError) -> str:
    url = _url(error)
    from .failures import DEADLINE_ADVICE, failure_kind

    if failure_kind(error) == "unreachable":
        cause = error.__cause__ or error.__context__
        reason = f": {one_line(str(cause))}" if cause is not None and str(cause) else ""
        return f"cannot reach the model server at {url}{reason}; is it running, and is the URL right?"
    if isinstance(error, openai.APITimeoutError):
        return f"the model server at {url} did not answer in time; {DEADLINE_ADVICE}"
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error.__context__
        reason = f": {one_line(str(cause))}" if cause is not None and str(cause) else ""
        return f"the connection to the model server at {url} failed{reason} ({_RETRIES})"
    if not isinstance(error, openai.APIStatusError):
        detail = one_line(str(error))
        return f"the model server at {url} sent a response the client could not read: {detail}"
    status, message = error.status_code, _message(error)
    if isinstance(error, openai.AuthenticationError):
        return f"the model server at {url} rejected the API key (401); {_KEYS}"
    if isinstance(error, openai.PermissionDeniedError):
        return f"the model server at {url} refused access (403): {message}"
    if isinstance(error, openai.NotFoundError):
        model = _requested_model(error)
        if model is not None:
            return f"model {model!r} was not found at {url} (404): {message}"
        return f"{url} does not exist (404); the base URL usually ends in /v1: {message}"
    if isinstance(error, openai.RateLimitError):
        if error.code == "insufficient_quota":
            return f"the API quota is exhausted at {url} (429): {message}"
        return f"still rate-limited by {url} {_RETRIES} (429): {message}"
    from .failures import WRONG_REQUEST_REASON

    if WRONG_REQUEST_REASON.search(message):
        return (
            f"the model server at {url} refused the request (HTTP {status}): {message}; not "
            "retried: the request itself is the problem (too long for the server's context, "
            "or a tool call it cannot parse)"
        )
    if status >= 500:
        return f"the model server at {url} kept failing (HTTP {status}) {_RETRIES}: {message}"
    return f"the model server at {url} rejected the request (HTTP {status}): {message}"


def _url(error: openai.APIError) -> str:
    request = getattr(error, "request", None)
    return str(request.url) if request is not None else "(unknown URL)"


def _message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return one_line(body["message"])
    return one_line(error.response.text or error.message)


def _requested_model(error: openai.APIStatusError) -> str | None:
    try:
        model = json.loads(error.request.content).get("model")
    except (ValueError, AttributeError, RuntimeError):
        return None
    return model if isinstance(model, str) else None
