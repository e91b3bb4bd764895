"""`OfflineAnalyst`: an SDK `Model` with no language model behind it.

Why: coderoom must run its showcase, its tests and its benchmarks without an API key and give the
same answer every time. The analyst acts only through the tools a real model would get (it writes
and runs code in the sandbox with `exec_command`), so everything around it - runner, sandbox,
record, outputs - is exercised for real. Decisions live in `policy.py`; this module turns them into
Responses-shaped output, with token estimates (characters / 4) so progress displays have numbers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import ModelResponse, ModelSettings, ModelTracing, Tool, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from ..base import DecliningModel
from .policy import Final, ToolCall, decide
from .transcript import read_transcript

MODEL_NAME = "offline"


class OfflineAnalyst(DecliningModel):
    """Deterministic analyst: same transcript, same next step.

    `declined` holds its last answer when that answer said the request is outside its scope: the
    runner then ends the run failed, without nudging (the same transcript gets the same answer).
    It only reports; the next step is still chosen from the transcript alone."""

    def __init__(self) -> None:
        self.declined: str | None = None

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        output, usage, _ = self._respond(system_instructions, input, tools)
        return ModelResponse(output=output, usage=usage, response_id=None)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        output, usage, turn = self._respond(system_instructions, input, tools)
        for event in _stream_events(output, usage, f"offline-{turn}"):
            yield event

    def _respond(
        self, instructions: str | None, items: str | list[TResponseInputItem], tools: list[Tool]
    ) -> tuple[list[TResponseOutputItem], Usage, int]:
        transcript = read_transcript(items)
        action = decide(transcript, [t.name for t in tools], instructions or "")
        n = transcript.total_calls + 1
        turn = n + len(transcript.assistant_texts)
        if isinstance(action, ToolCall):
            args = json.dumps(action.arguments, separators=(",", ":"))
            item: TResponseOutputItem = ResponseFunctionToolCall(
                id=f"fc-{n}", call_id=f"cr-{action.step}-{n}", type="function_call",
                name=action.name, arguments=args, status="completed",
            )
            out_chars = len(args)
        else:
            assert isinstance(action, Final)
            self.declined = action.text if action.declined else None
            item = _message(action.text, f"msg-{turn}")
            out_chars = len(action.text)
        in_chars = len(instructions or "") + len(json.dumps(items, default=str))
        usage = Usage(requests=1, input_tokens=in_chars // 4, output_tokens=out_chars // 4,
                      total_tokens=in_chars // 4 + out_chars // 4)
        return [item], usage, turn


def _message(text: str, item_id: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=item_id, type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[], logprobs=[])],
    )


def _stream_events(
    output: list[TResponseOutputItem], usage: Usage, response_id: str
) -> list[TResponseStreamEvent]:
    """The events of one complete response: created, each item added (+ text) and done, completed."""
    response = Response(
        id=response_id, created_at=0, model=MODEL_NAME, object="response", output=output,
        tool_choice="auto", tools=[], parallel_tool_calls=False, status="completed",
        usage=ResponseUsage(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            input_tokens_details=InputTokensDetails.model_validate({"cached_tokens": 0, "cache_write_tokens": 0}),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        ),
    )
    pending = response.model_copy(update={"output": [], "status": "in_progress", "usage": None})
    events: list[Any] = [ResponseCreatedEvent(type="response.created", response=pending,
                                              sequence_number=0)]
    for index, item in enumerate(output):
        events.append(ResponseOutputItemAddedEvent(type="response.output_item.added", item=item,
                                                   output_index=index,
                                                   sequence_number=len(events)))
        if isinstance(item, ResponseOutputMessage):
            text = "".join(part.text for part in item.content if isinstance(part, ResponseOutputText))
            events.append(ResponseTextDeltaEvent(type="response.output_text.delta", item_id=item.id,
                                                 output_index=index, content_index=0, delta=text,
                                                 logprobs=[], sequence_number=len(events)))
        events.append(ResponseOutputItemDoneEvent(type="response.output_item.done", item=item,
                                                  output_index=index,
                                                  sequence_number=len(events)))
    events.append(ResponseCompletedEvent(type="response.completed", response=response,
                                         sequence_number=len(events)))
    return events
