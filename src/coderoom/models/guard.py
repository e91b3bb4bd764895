"""A wrapper around an HTTP model that bounds each request and names the server in every failure.

Why a wrapper: httpx's timeouts are per read, so a server trickling a byte a second holds a
request forever; here each attempt has a whole-request deadline (CODEROOM_MODEL_TIMEOUT).
An answer the client cannot read (not JSON, no choices, missing fields) surfaces in the SDK as
JSONDecodeError, ModelBehaviorError or AttributeError; here it becomes a `ModelAnswerError` that
names the server and what was wrong. A reply cut by max_tokens (output tokens reaching the
limit: the SDK's ModelResponse carries no finish_reason) is never taken silently as the final
answer: the model is asked once to finish it, and a second cut is marked and recorded.
Every request, the continuation too, is first fitted into the model's context (`context`), and
carries a cap on its output tokens when the job set none (`output_cap`). A run with a listener
for it takes each reply as a stream (`streaming`), so its tokens are seen as they arrive. Each
request holds a slot of the run's `budget` while in flight, if it has one (`budget`: `coderoom
batch --model-concurrency`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx  # the HTTP library of the openai client
import pydantic
from agents import Model, ModelResponse, ModelSettings
from agents.exceptions import ModelBehaviorError
from agents.items import TResponseInputItem
from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest
from openai import APIConnectionError, APIError, APIStatusError
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

from ..record.events import MAX_STREAM_OFF_REASON_CHARS
from .budget import ModelBudget
from .context import ContextGuard
from .failures import DEADLINE_ADVICE, ModelAnswerError, ModelDeadlineExceeded, Notify
from .output_cap import reply_cap
from .streaming import (
    STREAM_REFUSALS, StreamCut, StreamNotOffered, StreamOverCap, StreamProgress, StreamSupport, collect,
)

CUT_NOTE = "[coderoom: this reply was cut at the max_tokens limit]"
CONTINUE = (
    "Your last reply was cut off at the output token limit (max_tokens). Finish it briefly, "
    "or call a tool."
)


class GuardedModel(Model):
    """Delegates to `inner`; adds the deadline, readable errors and the max_tokens check."""

    def __init__(
        self,
        inner: Model,
        server: str,
        deadline_s: float,
        context: ContextGuard | None = None,
        notify: Notify | None = None,
        *,
        max_tokens: int | None = None,
        cap_from_context: bool = False,
        stream: StreamSupport | None = None,
        budget: ModelBudget | None = None,
    ) -> None:
        """`max_tokens`: the cap when the job sets none (CODEROOM_MODEL_MAX_TOKENS);
        `cap_from_context`: without either, derive one from the context (Chat Completions);
        `stream`: whether the server streams (None: replies are not streamed, as in a model
        check, which has no one to show them to); `budget`: slots shared with other runs, one
        held per request in flight."""
        self.inner = inner
        self.server = server
        self.deadline_s = deadline_s
        self.context = context or ContextGuard(server, None)
        self.max_tokens = max_tokens
        self.cap_from_context = cap_from_context
        self.notify: Notify = notify or (lambda *_args, **_fields: None)
        self.stream = stream
        self._streams = stream or StreamSupport()  # shared by the runs `for_run` makes
        self._said_off = False  # this run recorded why it does not stream
        self.budget = budget

    def for_run(self, notify: Notify, context_size: int | None, budget: ModelBudget | None = None) -> GuardedModel:
        """The same model and server for one run: its retries and cut replies reported through
        `notify`, its context the server's figure or else the job's `context_size`, its
        requests within `budget` (if any)."""
        context = ContextGuard(self.server, self.context.probe, declared=context_size)
        return GuardedModel(
            self.inner, self.server, self.deadline_s, context, notify,
            max_tokens=self.max_tokens, cap_from_context=self.cap_from_context, stream=self._streams,
            budget=budget,
        )

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        return self.inner.get_retry_advice(request)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        model_settings = await self.capped(model_settings)
        response = await self._bounded(system_instructions, input, model_settings, *args, **kwargs)
        limit = model_settings.max_tokens
        if not _cut_text(response, limit):
            return response
        self.notify("model_reply_cut", max_tokens=limit, retried=True)
        history = [*_as_list(input), *response.to_input_items(), {"role": "user", "content": CONTINUE}]
        again = await self._bounded(system_instructions, history, model_settings, *args, **kwargs)
        if _cut_text(again, limit):
            self.notify("model_reply_cut", max_tokens=limit, retried=False)
            _append_note(again)
        again.usage.add(response.usage)  # both requests count
        return again

    async def capped(self, settings: ModelSettings) -> ModelSettings:
        """`settings` with the default output cap when the job set none (`output_cap`)."""
        if settings.max_tokens is not None:
            return settings
        cap = self.max_tokens
        if cap is None and self.cap_from_context:
            cap = reply_cap((await self.context.window()).size)
        return settings if cap is None else settings.resolve(ModelSettings(max_tokens=cap))

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async with self._slot():
            async for event in self.inner.stream_response(*args, **kwargs):
                yield event

    def _slot(self) -> contextlib.AbstractAsyncContextManager[None]:
        return self.budget.slot() if self.budget is not None else contextlib.nullcontext()

    async def close(self) -> None:
        await self.inner.close()

    async def _bounded(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: Any,
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        input, trimmed = await self.context.fit(system_instructions, input, tools, model_settings.max_tokens)
        if trimmed is not None:
            self.notify("context_trimmed", **trimmed)
        try:
            async with self._slot(), asyncio.timeout(self.deadline_s):  # waiting for a slot is not the server's time
                return await self._answer(system_instructions, input, model_settings, tools, *args, **kwargs)
        except TimeoutError:
            raise ModelDeadlineExceeded(
                f"the model server at {self.server} did not finish its answer within "
                f"{self.deadline_s:g} s; {DEADLINE_ADVICE}"
            ) from None
        except APIError:
            raise  # the retry policy and explain_model_error handle these
        except (json.JSONDecodeError, UnicodeDecodeError, pydantic.ValidationError, AttributeError, TypeError,
                ModelBehaviorError) as exc:
            detail = " ".join(str(exc).split())[:300]
            raise ModelAnswerError(
                f"the model server at {self.server} sent an answer that is not a valid "
                f"completion ({type(exc).__name__}: {detail}); check that the base URL is an "
                "OpenAI-compatible endpoint (usually ending in /v1) and that the server is healthy"
            ) from exc

    async def _answer(self, system_instructions: str | None, input: Any, model_settings: ModelSettings,
                      *args: Any, **kwargs: Any) -> ModelResponse:
        """One request: streamed when this run streams and the server does, else as one answer.

        A server that does not stream (`streaming.STREAM_REFUSALS`) is asked once more, without
        streaming; its answer to that is the outcome (a refusal of it too is the server's own
        error, raised as it is, and streaming stays on: it was not what the server refused), and
        once that answer came, no later request to this model streams (`_stream_off`)."""
        if self.stream is None or not self.stream.streams:
            response = await self.inner.get_response(system_instructions, input, model_settings, *args, **kwargs)
            self._say_off()
            return response
        streamed = model_settings
        if streamed.include_usage is None:  # Chat Completions servers send usage in a stream only if asked
            streamed = streamed.resolve(ModelSettings(include_usage=True))
        events = self.inner.stream_response(system_instructions, input, streamed, *args, **kwargs)
        try:
            return await collect(events, StreamProgress(self.notify), streamed.max_tokens)
        except StreamNotOffered:
            status, reason = None, "its answer to a streaming request carried no streamed reply"
        except APIStatusError as refused:
            if refused.status_code not in STREAM_REFUSALS:
                raise
            status, reason = refused.status_code, _said(refused)
        except StreamCut as cut:  # as a dropped connection is: retried, the server still streams
            raise APIConnectionError(message=str(cut), request=httpx.Request("POST", self.server)) from cut
        except StreamOverCap as over:  # not retried: the same server would do the same
            raise ModelAnswerError(
                f"the model server at {self.server} streamed {over}: it does not honour max_tokens, "
                "and the reply was not read further"
            ) from over
        finally:  # a stream cut short (the deadline, a cancel) closes its connection now
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
        response = await self.inner.get_response(system_instructions, input, model_settings, *args, **kwargs)
        self._stream_off(status, reason)
        return response

    def _stream_off(self, status: int | None, reason: str) -> None:
        """No later request to this model streams (its `StreamSupport` is shared by every run of
        the resolved model); the run that found out records why (`_say_off`)."""
        if self.stream is not None and self.stream.streams:
            self.stream.streams, self.stream.status, self.stream.reason = False, status, reason
        self._say_off()

    def _say_off(self) -> None:
        """Record once a run why its requests do not stream (`model_stream_off`), in the run that
        found out and in each later run of the model alike (not in a model check: `stream` None)."""
        if self.stream is not None and not self.stream.streams and not self._said_off:
            self._said_off = True
            self.notify("model_stream_off", status=self.stream.status, reason=self.stream.reason)


def _said(error: APIStatusError) -> str:
    """The server's own words of a refusal (its error body's message), on one line, bounded."""
    body = error.body if isinstance(error.body, dict) else {}
    message = body.get("message") if isinstance(body.get("message"), str) else error.message
    return " ".join(str(message).split())[:MAX_STREAM_OFF_REASON_CHARS]


def _as_list(input: str | list[TResponseInputItem]) -> list[Any]:
    return [{"role": "user", "content": input}] if isinstance(input, str) else list(input)


def _cut_text(response: ModelResponse, limit: int | None) -> bool:
    """A final text answer (no tool call) that used every token it was allowed."""
    if limit is None or response.usage.output_tokens < limit:
        return False
    return not any(getattr(item, "type", "") == "function_call" for item in response.output)


def _append_note(response: ModelResponse) -> None:
    for item in reversed(response.output):
        if isinstance(item, ResponseOutputMessage) and item.content:
            part = item.content[-1]
            if isinstance(part, ResponseOutputText):
                part.text = f"{part.text}\n\n{CUT_NOTE}"
                return
