"""What coderoom changes in the history before each model call (the SDK's call_model_input_filter).

* A tool call whose arguments are not a JSON object is sent back with `{}` as its arguments:
  Chat Completions servers re-parse every earlier call (llama.cpp answers 500 "Failed to parse
  tool call arguments as JSON" to the whole request otherwise). The model still sees its
  mistake: that call's tool result says the arguments were invalid and quotes them (bounded),
  see `tool_error_message`.
* For Chat Completions vision models, images from tool outputs move into a user message
  (`chat_images`).
"""

from __future__ import annotations

import json
from typing import Any

from agents.run_config import CallModelData, ModelInputData, ToolErrorFormatterArgs

from ..hostile.text import terminal_safe
from .base import ResolvedModel
from .chat_images import images_after_tool_outputs

QUOTE_LIMIT = 300


def input_filter(model: ResolvedModel) -> Any:
    """The filter for this model, or None when nothing needs changing (offline)."""
    if model.api == "offline":
        return None
    chat_images = model.api == "chat_completions" and model.accepts_images

    def apply(data: CallModelData[Any]) -> ModelInputData:
        repaired = ModelInputData(
            input=[_valid_arguments(item) for item in data.model_data.input],
            instructions=data.model_data.instructions,
        )
        if chat_images:
            return images_after_tool_outputs(
                CallModelData(model_data=repaired, agent=data.agent, context=data.context)
            )
        return repaired

    return apply


def tool_error_message(args: ToolErrorFormatterArgs[Any]) -> str | None:
    """Say what was wrong with a call in terms the model can act on; else the SDK's default."""
    error = args.error
    if args.kind == "tool_not_found":
        return (
            f"There is no tool named {_quote(args.tool_name)}. Call one of the tools you were "
            "given, with a JSON object as its arguments."
        )
    text = str(error or "")
    if text.startswith("Invalid JSON input for tool"):
        received = text.partition(": ")[2]
        return (
            f"The call to {args.tool_name} was not run: its arguments must be a JSON object "
            f"matching the tool's schema. Received: {_quote(received)}"
        )
    return None


def _valid_arguments(item: Any) -> Any:
    if not (isinstance(item, dict) and item.get("type") == "function_call"):
        return item
    try:
        parsed = json.loads(item.get("arguments") or "{}")
    except ValueError:
        parsed = None
    return item if isinstance(parsed, dict) else {**item, "arguments": "{}"}


def _quote(text: str) -> str:
    text = terminal_safe(text)
    cut = text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + f"… ({len(text)} characters)"
    return json.dumps(cut, ensure_ascii=False)
