"""`RecordingHooks` turns the SDK's run lifecycle (model calls, tool calls) into record events."""

from __future__ import annotations

import json
import time
from typing import Any, Protocol, runtime_checkable

from agents import Agent, RunContextWrapper, RunHooks, Tool
from agents.items import ModelResponse, TResponseInputItem
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage

from .events import Cell, ShellResult
from .writer import Recorder, bounded


# A model's text and a tool call's arguments are the model's to choose, of any size: bounded in
# the record (a marker says how much more there was), so no event outgrows the reader's line
# limit, even with every character escaped (\uXXXX is 6 bytes).
MAX_MESSAGE_CHARS = 100_000
MAX_ARGUMENT_CHARS = 1_000_000


def _arguments(raw: str | None) -> Any:
    if raw is None:
        return None
    if len(raw) > MAX_ARGUMENT_CHARS:
        return bounded(raw, MAX_ARGUMENT_CHARS)  # kept as text: cut JSON does not parse
    try:
        return json.loads(raw)
    except (TypeError, json.JSONDecodeError, RecursionError):
        return raw


def _output_items(response: ModelResponse) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for item in response.output:
        kind = getattr(item, "type", None)
        if isinstance(item, ResponseOutputMessage):
            text = "".join(getattr(part, "text", "") or "" for part in item.content)
            items.append({"kind": "message", "text": bounded(text, MAX_MESSAGE_CHARS)})
        elif isinstance(item, ResponseFunctionToolCall):
            items.append(
                {
                    "kind": "tool_call",
                    "call_id": item.call_id,
                    "name": item.name,
                    "arguments": _arguments(item.arguments),
                }
            )
        elif kind is not None:
            items.append({"kind": str(kind)})
    return items


def _usage(usage: Any) -> dict[str, int]:
    """A reply's usage as the record keeps it: the server's own counts, a negative one (a server
    may send anything, attack W-S10) as 0, so no total the record or the CLI adds up goes down."""
    return {
        name: max(0, getattr(usage, name)) for name in ("requests", "input_tokens", "output_tokens", "total_tokens")
    }


@runtime_checkable
class KeepsShellResults(Protocol):
    """A shell tool that keeps what each call ran (`tools.shell_results.record_shell`) until the
    record takes it, once: the record's shell steps come from here, not from the tool's prose."""

    def take_shell(self, call_id: str) -> ShellResult | None: ...


@runtime_checkable
class KeepsCells(Protocol):
    """A tool whose result has a structured cell (run_python: `tools.python_kernel`) that it
    keeps by call id until the record takes it, once; a tool says so by subclassing this."""

    def take_cell(self, call_id: str) -> Cell | None: ...


def tool_output_text(result: object) -> str:
    """The text a tool result gave the model (its images are in the workspace, not recorded)."""
    from agents.tool import ToolOutputImage, ToolOutputText

    parts = result if isinstance(result, list) else [result]
    return "\n".join(
        part.text if isinstance(part, ToolOutputText) else str(part)
        for part in parts
        if not isinstance(part, ToolOutputImage)
    )


class RecordingHooks(RunHooks[Any]):
    """Records model calls and tool calls through the SDK's run hooks."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.turn = 0
        self._llm_started = 0.0
        self._input: tuple[int, int] = (0, 0)
        self._tool_started: dict[str, float] = {}

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        self.turn += 1
        chars = len(system_prompt or "") + sum(len(json.dumps(i, default=str)) for i in input_items)
        self._input = (len(input_items), chars)
        self._llm_started = time.monotonic()
        self.recorder.emit("model_start", turn=self.turn)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        self.recorder.emit(
            "model_call",
            turn=self.turn,
            input_items=self._input[0],
            input_chars=self._input[1],
            duration_s=round(time.monotonic() - self._llm_started, 4),
            usage=_usage(response.usage),
            output=_output_items(response),
        )

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool) -> None:
        call_id = getattr(context, "tool_call_id", None) or tool.name
        self._tool_started[call_id] = time.monotonic()
        self.recorder.emit(
            "tool_start",
            call_id=call_id,
            name=tool.name,
            arguments=_arguments(getattr(context, "tool_arguments", None)),
        )

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        call_id = getattr(context, "tool_call_id", None) or tool.name
        # a tool with a structured result (run_python's cell, a shell call's result) hands it over by call id
        started = self._tool_started.pop(call_id, time.monotonic())
        self.recorder.emit(
            "tool_result",
            call_id=call_id,
            name=tool.name,
            arguments=_arguments(getattr(context, "tool_arguments", None)),
            output=bounded(tool_output_text(result)),
            cell=tool.take_cell(call_id) if isinstance(tool, KeepsCells) else None,
            shell=tool.take_shell(call_id) if isinstance(tool, KeepsShellResults) else None,
            duration_s=round(time.monotonic() - started, 4),
        )
