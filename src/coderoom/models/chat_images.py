"""Figures for Chat Completions models: tool messages there carry text only.

A run_python or view_image result with images is, in the SDK's items, a function_call_output
holding text and image parts. The Chat Completions converter keeps only the text (a `tool`
message cannot hold an image), so a vision model would never see the figure. This filter, run
before every model call, leaves each tool output's text in place and moves its images into a
user message right after the tool outputs of that turn (tool messages must directly follow the
assistant message that called them), which every vision Chat Completions server accepts.
"""

from __future__ import annotations

from typing import Any

from agents.run_config import CallModelData, ModelInputData

_NOTE = "Images returned by the tool call(s) above, in order:"


def images_after_tool_outputs(data: CallModelData[Any]) -> ModelInputData:
    items: list[Any] = []
    pending: list[dict[str, Any]] = []
    inputs: list[Any] = list(data.model_data.input)  # plain dicts here, read field by field
    for item in inputs:
        is_output = isinstance(item, dict) and item.get("type") == "function_call_output"
        if pending and not is_output:
            items.append(_user_message(pending))
            pending = []
        if is_output and isinstance(item.get("output"), list):
            kept, images = _split(item["output"])
            if images:
                item = {**item, "output": kept or [{"type": "input_text", "text": "(images only)"}]}
                pending += images
        items.append(item)
    if pending:
        items.append(_user_message(pending))
    return ModelInputData(input=items, instructions=data.model_data.instructions)


def _split(parts: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    kept, images = [], []
    for part in parts:
        if isinstance(part, dict) and part.get("type") == "input_image" and part.get("image_url"):
            images.append({"type": "input_image", "image_url": part["image_url"], "detail": part.get("detail") or "auto"})
        else:
            kept.append(part)
    return kept, images


def _user_message(images: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "input_text", "text": _NOTE}, *images]}
