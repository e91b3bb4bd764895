"""Model settings: the job's `[model]` table and the CLI flags, as the SDK's `ModelSettings`.

Also the retry policy, run by the SDK's runner (`ModelSettings.retry`) rather than hidden in the
`openai` client (whose retries are turned off): so a retry is visible (each wait is reported
through `notify` and recorded), a server's Retry-After is honoured only up to a bound, and an
answer that says the request itself is wrong (400/404/413/422, or a 500 whose reason is a
context overflow or an unparseable tool call) is not sent again. Neither is a request that ran
into its deadline (the server was generating; the same request would do it again), and a server
that refuses the connection gets one quick retry, not a backoff of minutes (`failure_kind`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import ModelSettings
from agents.retry import ModelRetrySettings, RetryDecision, RetryPolicyContext

from .options import Api, ModelOptions
from .failures import REQUEST_IS_WRONG, RETRYABLE, WRONG_REQUEST_REASON, Notify, failure_kind, one_line

"""`notify(event_type, **fields)`: the run's recorder (`Recorder.emit`)."""

RETRY_AFTER_CAP_S = 60.0
BACKOFF_CAP_S = 30.0
UNREACHABLE_RETRY_S = 0.5  # one quick retry for a refused connection (a server still starting)
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
        kind = failure_kind(context.error)
        if kind == "deadline" or (kind == "unreachable" and context.attempt > 1):
            return RetryDecision(retry=False, reason=reason)
        transient = kind == "unreachable" or error.is_network_error or status in RETRYABLE or (
            status is not None and status >= 500 and not WRONG_REQUEST_REASON.search(reason)
        )
        if status in REQUEST_IS_WRONG or not transient:
            return RetryDecision(retry=False, reason=reason)
        asked = error.retry_after
        if kind == "unreachable":
            delay = UNREACHABLE_RETRY_S
        elif asked is not None:
            delay = min(asked, RETRY_AFTER_CAP_S)
        else:
            delay = min(2.0 ** (context.attempt - 1), BACKOFF_CAP_S)
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
