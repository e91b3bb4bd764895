"""Model settings: the job's `[model]` table and the CLI flags, as the SDK's `ModelSettings`.

Also the retry policy, run by the SDK's runner (`ModelSettings.retry`) rather than hidden in the
`openai` client (whose retries are turned off): so a retry is visible (each wait is reported
through `notify` and recorded), a server's Retry-After is honoured only up to a bound, and an
answer that says the request itself is wrong (400/404/413/422, or a 500 whose reason is a
context overflow or an unparseable tool call) is not sent again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from agents import ModelSettings
from agents.retry import ModelRetrySettings, RetryDecision, RetryPolicyContext
from pydantic import BaseModel, ConfigDict, Field

from .base import Api
from .errors import one_line

Notify = Callable[..., Any]
"""`notify(event_type, **fields)`: the run's recorder (`Recorder.emit`)."""

RETRY_AFTER_CAP_S = 60.0
BACKOFF_CAP_S = 30.0
# Statuses that mean "this request is wrong": sending it again gets the same answer.
REQUEST_IS_WRONG = frozenset({400, 401, 403, 404, 413, 422})
RETRYABLE = frozenset({408, 409, 429})
# 5xx bodies that are really about the request (llama.cpp answers these with 500).
WRONG_REQUEST_REASON = re.compile(
    r"exceeds the available context size|context length|context size|too many tokens"
    r"|failed to parse tool call|parse tool call arguments|invalid (json|tool)",
    re.IGNORECASE,
)


class ModelOptions(BaseModel):
    """What a job may set about the model's requests (`[model]` in coderoom.toml); None = default."""

    model_config = ConfigDict(extra="forbid")

    tool_choice: str | None = Field(default=None, description="auto, required, none or a tool name")
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    parallel_tool_calls: bool | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    extra_body: dict[str, Any] | None = None
    context_size: int | None = Field(
        default=None, ge=512, description="tokens; read from the server when it says (llama.cpp)"
    )


# Chat Completions servers differ in what they assume without tool_choice; say it explicitly.
_DEFAULTS: dict[Api, dict[str, Any]] = {
    "chat_completions": {"tool_choice": "auto"},
    "responses": {},
    "offline": {},
}


def model_settings(options: ModelOptions, api: Api, notify: Notify, max_retries: int) -> ModelSettings:
    given = options.model_dump(exclude_none=True, exclude={"context_size", "reasoning_effort"})
    values: dict[str, Any] = {**_DEFAULTS[api], **given}
    if options.reasoning_effort is not None:
        values["reasoning"] = {"effort": options.reasoning_effort}
    if api != "offline":
        values["retry"] = ModelRetrySettings(max_retries=max_retries, policy=retry_policy(notify))
    return ModelSettings(**values)


def retry_policy(notify: Notify) -> Callable[[RetryPolicyContext], RetryDecision]:
    """Retry transient failures with a bounded, reported wait; never a request that is wrong."""

    def policy(context: RetryPolicyContext) -> RetryDecision:
        error = context.normalized
        status = error.status_code
        reason = one_line(error.message or str(context.error), 500)
        from .guard import ModelDeadlineExceeded

        transient = error.is_network_error or error.is_timeout or status in RETRYABLE
        transient = transient or isinstance(context.error, ModelDeadlineExceeded) or (
            status is not None and status >= 500 and not WRONG_REQUEST_REASON.search(reason)
        )
        if status in REQUEST_IS_WRONG or not transient:
            return RetryDecision(retry=False, reason=reason)
        asked = error.retry_after
        delay = min(asked, RETRY_AFTER_CAP_S) if asked is not None else min(2.0 ** (context.attempt - 1), BACKOFF_CAP_S)
        notify(
            "model_retry",
            attempt=context.attempt,
            max_retries=context.max_retries,
            status=status,
            reason=reason,
            retry_after=asked,
            wait_s=delay,
        )
        return RetryDecision(retry=True, delay=delay, reason=reason)

    return policy
