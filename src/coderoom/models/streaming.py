"""A model reply taken as a stream, so the CLI and the page see it arrive: tokens, rate, text.

Why the guard consumes the stream rather than `Runner.run_streamed`: the runner calls
`Model.get_response` (through the SDK's retry policy) and `GuardedModel.get_response` is where
each request is fitted into the context, capped, bounded by its deadline and checked for a cut
reply; `run_streamed` would call `stream_response` around all of that. So the guard asks its inner
model for `stream_response` (the SDK's own stream handling: the same raw response events that
`run_streamed` hands out) and builds the one `ModelResponse` the runner gets from its completed
event. The record keeps that final reply only; the deltas reach listeners as `model_stream`
events (`record.events.LIVE_ONLY`), at most one each REPORT_EVERY_S.

A server that does not stream is asked again without streaming, once, and, for the rest of the
process, only so (`StreamSupport`; each run of that model records `model_stream_off` once: the
one that found out, and every later one, so a long-lived `serve`/`mcp` run says why it did not
stream). Not streaming is:
an answer to a `stream: true` request that is a plain JSON body, which carries no server-sent
event, or no completed response; or a refusal of that request with a status of STREAM_REFUSALS
(a server that rejects `stream` or `stream_options` says 400 "stream is not supported", or 415
or 422 for a field it does not take). Which refusal is about streaming cannot be told from its
words, so the answer to the same request without streaming decides: if that is refused too, the
refusal was the server's own error, reported as it is, and the next request streams again (one
retry a request, never a loop). Other statuses (401, 403, 404, 408, 429, 5xx) are not about the
request's form: the retry policy and `failures` handle them as for any request.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from agents import ModelResponse
from agents.usage import Usage, _response_usage_to_usage
from openai.types.responses import (
    ResponseCompletedEvent, ResponseFunctionCallArgumentsDeltaEvent, ResponseOutputItemDoneEvent,
    ResponseReasoningSummaryTextDeltaEvent, ResponseReasoningTextDeltaEvent, ResponseRefusalDeltaEvent,
    ResponseTextDeltaEvent,
)

STREAM_REFUSALS = frozenset({400, 415, 422})  # a refused streaming request is asked again without
REPORT_EVERY_S = 0.25  # a listener hears of a streaming reply at most this often
MAX_PIECE_CHARS = 4_000  # of the text one report carries (the page shows it as it grows)
TEXT_DELTAS = (ResponseTextDeltaEvent, ResponseRefusalDeltaEvent)
MAX_DELTAS_PER_TOKEN = 2  # of a reply capped at max_tokens: a delta is a token or more on every server
DELTAS_SLACK = 64
OTHER_DELTAS = (ResponseFunctionCallArgumentsDeltaEvent, ResponseReasoningTextDeltaEvent,
                ResponseReasoningSummaryTextDeltaEvent)

Report = Callable[..., Any]
"""`report("model_stream", **fields)`: the run's recorder, which passes it to listeners only."""


class StreamNotOffered(Exception):
    """The server answered a streaming request with nothing a stream carries."""


class StreamOverCap(Exception):
    """A stream went on past its output cap: the server does not honour max_tokens. Read further,
    each delta costs the host far more than its bytes (the SDK parses each chunk into pydantic
    models: 100,000 one-character deltas took 15 s of CPU, the same text as one answer 0.4 s),
    up to the 32 MiB answer bound (attack W-S06)."""


class StreamCut(Exception):
    """A stream that began a reply ended before it did (no finish_reason, no response.completed):
    a cut connection, which the guard reports as one (retried), never a reply (attack W-S01)."""


@dataclass
class StreamSupport:
    """Whether the server streams: unknown until its first answer, shared by every run of one
    resolved model (`GuardedModel.for_run`), so a server that does not is asked once; and why
    not (`status`, `reason`), for each later run to record too (`model_stream_off`)."""

    streams: bool = True
    status: int | None = None
    reason: str = ""


class StreamProgress:
    """Counts a reply's deltas as they come (each one token on llama.cpp and OpenAI's API) and
    reports them, throttled: the count, the rate since the first one, the new text."""

    def __init__(self, report: Report, clock: Callable[[], float] = time.monotonic) -> None:
        self.report = report
        self.clock = clock
        self.started = clock()
        self.first: float | None = None
        self.tokens = 0
        self.chars = 0
        self.piece = ""
        self.last_report = 0.0
        self.reported = 0  # the count the last report carried

    def delta(self, event: Any) -> None:
        now = self.clock()
        if self.first is None:
            self.first = now
        self.tokens += 1
        text = event.delta if isinstance(event.delta, str) else ""
        self.chars += len(text)
        if isinstance(event, TEXT_DELTAS) and len(self.piece) < MAX_PIECE_CHARS:
            self.piece += text[: MAX_PIECE_CHARS - len(self.piece)]
        if self.tokens == 1 or now - self.last_report >= REPORT_EVERY_S:
            self.flush(now)

    def flush(self, now: float) -> None:
        generating = now - (self.first if self.first is not None else now)
        rate = round(self.tokens / generating, 2) if self.tokens > 1 and generating > 0 else None
        self.report(
            "model_stream", tokens=self.tokens, chars=self.chars, rate=rate,
            elapsed_s=round(now - self.started, 3), text=self.piece,
        )
        self.piece, self.last_report, self.reported = "", now, self.tokens


async def collect(events: AsyncIterator[Any], progress: StreamProgress, max_tokens: int | None = None) -> ModelResponse:
    """The reply a stream of raw response events ends with, its deltas reported on the way; a
    stream of more deltas than a reply of `max_tokens` can have is not read to its end."""
    done: list[Any] = []
    completed = None
    most = None if max_tokens is None else max_tokens * MAX_DELTAS_PER_TOKEN + DELTAS_SLACK
    async for event in events:
        if isinstance(event, TEXT_DELTAS + OTHER_DELTAS):
            progress.delta(event)
            if most is not None and progress.tokens > most:
                raise StreamOverCap(f"more than {most:,} deltas for a reply of at most max_tokens={max_tokens:,}")
        elif isinstance(event, ResponseOutputItemDoneEvent):
            done.append(event.item)
        elif isinstance(event, ResponseCompletedEvent):
            completed = event.response
    if completed is None and progress.tokens:
        raise StreamCut("the stream ended before its reply did (no response.completed)")
    if completed is None or (not completed.output and not done and completed.usage is None and not progress.tokens):
        raise StreamNotOffered("the server's answer to a streaming request carried no streamed reply")
    if progress.tokens > progress.reported:
        progress.flush(progress.clock())  # the last count, before the reply's own event
    return ModelResponse(
        output=list(completed.output or done),
        usage=_response_usage_to_usage(completed.usage) if completed.usage else Usage(requests=1),
        response_id=completed.id,
        request_id=getattr(completed, "_request_id", None),
    )
