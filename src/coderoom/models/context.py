"""Keeping every request within the model's context window.

Why: a local server has a small, fixed context (llama.cpp `-c`, Ollama `num_ctx`) and a run's
history grows with every tool output; llama.cpp refuses a request that does not fit (400 "exceeds
the available context size") and Ollama silently drops its beginning, the task. So before each
request coderoom estimates its size and, over budget (context - reply reserve - margin), first
replaces the oldest tool outputs with MARKER, then drops the oldest tool calls and assistant
messages, and last cuts the newest outputs to what fits; user messages (the task, nudges) always
stay. When even that does not fit, the run ends with `ContextTooSmall` naming the context size.

Where: in `GuardedModel`, just before the request leaves, not in the SDK's
`call_model_input_filter`: the filter sees neither the tool schemas (part of every request, bound
later by the sandbox capabilities) nor max_tokens, nor the continuation GuardedModel sends for a
cut reply. The trim changes only what is sent; the run's own history (and record) keep it all.

Counting: with llama.cpp's `/tokenize`, the request's text (its JSON form, a little more than the
chat template renders) is counted by the server's own tokenizer, which calibrates the estimate
used while trimming, and the result is counted again. Elsewhere an estimate (`estimate_tokens`)
from the text's pieces: a word of ASCII letters costs a token per 4 letters, each digit one,
each run of symbols 0.6 a character (1.5 for other scripts), a single space none. Measured
against SmolLM2's tokenizer (49k vocabulary, a token per digit) it gives 0.84-0.92x the real
count for CSV and JSON tool outputs and non-Latin text, 1.0-1.3x for code, prose, the system
prompt and the tool schemas; characters/3.5 gives 0.3x for CSV. The margin (a 16th of the
context) covers the shortfall.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .failures import ContextTooSmall
from .output_cap import reply_cap
from .server import ServerFacts, ServerProbe

MARKER = "[coderoom: output trimmed to fit the model's context: {chars} chars]"
_PIECE = re.compile(r"[A-Za-z]+|\d|\s+|[^\sA-Za-z\d]+")
ITEM_OVERHEAD = 8  # tokens a chat template adds around each message
IMAGE_TOKENS = 1024  # an image part, whatever its encoded size
ROUNDS = 3  # trim, count exactly, trim harder: at most this many times
ESTIMATE = "estimate from the text (no tokenizer endpoint)"


@dataclass(frozen=True)
class Window:
    size: int | None  # tokens; None: unknown, nothing is trimmed
    source: str
    method: str  # how tokens are counted


class ContextGuard:
    """Fits each request of one model into its context window."""

    def __init__(self, server: str, probe: ServerProbe | None, declared: int | None = None) -> None:
        self.server = server
        self.probe = probe
        self.declared = declared  # the job's [model] context_size (`GuardedModel.for_run`)
        self._window: Window | None = None

    async def window(self) -> Window:
        """The server's own figure, else the job's, else unknown; asked once."""
        if self._window is None:
            facts = await self.probe.facts() if self.probe is not None else ServerFacts()
            method = "llama.cpp /tokenize" if facts.tokenize else ESTIMATE
            if facts.context_size:
                self._window = Window(facts.context_size, facts.context_source, method)
            elif self.declared:
                self._window = Window(self.declared, "the job's [model] context_size", method)
            else:
                self._window = Window(None, "unknown", method)
        return self._window

    async def fit(
        self, system: str | None, input: str | list[Any], tools: Sequence[Any], max_tokens: int | None
    ) -> tuple[str | list[Any], dict[str, Any] | None]:
        """`input` as it can be sent, and what was trimmed (a `context_trimmed` event's fields)."""
        window = await self.window()
        if window.size is None:
            return input, None
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        reply = max_tokens or reply_cap(window.size)
        budget = window.size - reply - max(32, window.size // 16)
        fixed_text = "\n".join([system or "", *(_tool_text(t) for t in tools)])
        sizer = Sizer(fixed_text, 1.0)
        before = sizer.total(items)
        use_server = self.probe is not None and window.method != ESTIMATE and before * 2 > budget
        if use_server:
            exact = await self._exact(fixed_text, items)
            sizer = Sizer(fixed_text, exact / before if exact else 1.0)
            before = exact or before
        if before <= budget:
            return input, None
        target = budget
        for _ in range(ROUNDS):
            trimmed = trim(items, sizer, target)
            if trimmed is None:
                break
            after = (await self._exact(fixed_text, trimmed.items) if use_server else 0) or sizer.total(trimmed.items)
            if after <= budget:
                return trimmed.items, {
                    "context_size": window.size, "source": window.source, "method": window.method,
                    "budget": budget, "tokens_before": before, "tokens_after": after,
                    "outputs_trimmed": trimmed.outputs, "items_dropped": trimmed.dropped,
                    "chars_removed": trimmed.chars,
                }  # fmt: skip
            target -= after - budget + ITEM_OVERHEAD
        floor = sizer.total(minimum(items))
        raise ContextTooSmall(
            f"the request does not fit the model's context at {self.server}: {window.size} tokens "
            f"({window.source}); the instructions, tool schemas, user messages and the last turn "
            f"with its outputs cut take about {floor} tokens, and {reply} are kept for the reply "
            "(max_tokens); start the server with a larger context (llama.cpp -c, Ollama num_ctx), "
            "lower max_tokens, or shorten the job's prompt"
        )

    async def _exact(self, fixed_text: str, items: list[Any]) -> int | None:
        assert self.probe is not None
        counted = await self.probe.count_tokens("\n".join([fixed_text, *(_item_text(i) for i in items)]))
        if counted is None:
            return None
        return counted + len(items) * ITEM_OVERHEAD + sum(_images(i) for i in items) * IMAGE_TOKENS


@dataclass(frozen=True)
class Sizer:
    """Estimated tokens of a request: the fixed part (system, tools) plus each item."""

    fixed_text: str
    scale: float  # the server's count / this estimate, when the server counted

    def text(self, text: str) -> int:
        return int(self.scale * estimate_tokens(text)) + 1

    def item(self, item: Any) -> int:
        return self.text(_item_text(item)) + ITEM_OVERHEAD + _images(item) * IMAGE_TOKENS

    def total(self, items: Sequence[Any]) -> int:
        return self.text(self.fixed_text) + sum(self.item(i) for i in items)


def estimate_tokens(text: str) -> float:
    """Tokens `text` takes, estimated from its pieces (see the module's docstring)."""
    tokens = 0.0
    for piece in _PIECE.findall(text):
        first = piece[0]
        if first.isascii() and first.isalpha():
            tokens += (len(piece) + 3) // 4
        elif first.isdigit():
            tokens += 1
        elif first.isspace():
            tokens += 0 if piece == " " else (len(piece) + 3) // 4
        else:
            tokens += 0.6 * sum(1 if c.isascii() else 1.5 for c in piece)
    return tokens


@dataclass
class Trimmed:
    items: list[Any]
    outputs: int = 0  # tool outputs replaced or cut
    dropped: int = 0  # items left out
    chars: int = 0  # characters of tool output left out


def trim(items: list[Any], sizer: Sizer, budget: int) -> Trimmed | None:
    """`items` within `budget` tokens, oldest tool outputs first; None when that cannot be done."""
    result = Trimmed(list(items))
    costs = [sizer.item(i) for i in result.items]
    fixed = sizer.text(sizer.fixed_text)
    tail = _tail_start(result.items)

    def over() -> bool:
        return fixed + sum(c for c in costs if c) > budget

    def replace(index: int, kept: str) -> None:
        text = _output_text(result.items[index].get("output"))
        result.items[index] = _cut(result.items[index], text, len(kept))
        costs[index] = sizer.item(result.items[index])
        result.outputs += 1
        result.chars += len(text) - len(kept)

    for index in range(tail):  # 1: old outputs become a marker
        if not over():
            return _compact(result, costs)
        if _is_output(result.items[index]) and len(_output_text(result.items[index].get("output"))) > 80:
            replace(index, "")
    for index in range(tail):  # 2: old calls, their outputs, assistant messages: left out
        if not over():
            return _compact(result, costs)
        if costs[index] and _droppable(result.items[index]):
            for other in _with_outputs(result.items, index, tail):
                if costs[other]:
                    costs[other] = 0
                    result.dropped += 1
    for index in range(tail, len(result.items)):  # 3: the newest outputs, cut to what fits
        if over() and _is_output(result.items[index]):
            text = _output_text(result.items[index].get("output"))
            costs[index] = 0
            room = budget - fixed - sum(costs)
            replace(index, text[: _fitting_prefix(result.items[index], text, room, sizer)])
    return None if over() else _compact(result, costs)


def minimum(items: list[Any]) -> list[Any]:
    """What no trim removes: user messages and the last turn with its outputs reduced to a marker."""
    tail = _tail_start(items)
    kept = [i for i in items[:tail] if _is_user(i)]
    return kept + [{**i, "output": MARKER} if _is_output(i) else i for i in items[tail:]]


def _compact(result: Trimmed, costs: list[int]) -> Trimmed:
    result.items = [item for item, cost in zip(result.items, costs) if cost]
    return result


def _cut(item: dict[str, Any], text: str, keep: int) -> dict[str, Any]:
    """The tool output `item` with only the first `keep` characters of its `text`, and MARKER."""
    note = MARKER.format(chars=len(text) - keep)
    return {**item, "output": f"{text[:keep]}\n{note}" if keep else note}


def _fitting_prefix(item: dict[str, Any], text: str, room: int, sizer: Sizer) -> int:
    """The longest head of `text` that, cut with the marker, leaves `item` at most `room` tokens."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if sizer.item(_cut(item, text, middle)) <= room:
            low = middle
        else:
            high = middle - 1
    return low


def _tail_start(items: list[Any]) -> int:
    """Where the last turn starts: the model's last tool calls and their outputs (or, when the
    last item is a message, that message)."""
    index = len(items)
    while index > 0 and (_is_output(items[index - 1]) or _image_message(items[index - 1])):
        index -= 1
    while index > 0 and _type(items[index - 1]) in ("function_call", "reasoning"):
        index -= 1
    return index if index < len(items) else max(0, len(items) - 1)


def _with_outputs(items: list[Any], index: int, tail: int) -> list[int]:
    """A tool call goes with its outputs: Chat Completions refuses one without the other."""
    call_id = items[index].get("call_id") if _type(items[index]) == "function_call" else None
    if call_id is None:
        return [index]
    return [index, *(i for i in range(index + 1, tail) if _is_output(items[i]) and items[i].get("call_id") == call_id)]


def _type(item: Any) -> str:
    return str(item.get("type") or "") if isinstance(item, dict) else ""


def _is_output(item: Any) -> bool:
    return _type(item) == "function_call_output"


def _is_user(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "user" and not _images(item)


def _image_message(item: Any) -> bool:
    """The user message `chat_images` puts after tool outputs to carry their figures."""
    return isinstance(item, dict) and item.get("role") == "user" and _images(item) > 0


def _droppable(item: Any) -> bool:
    return not _is_user(item) and not (isinstance(item, dict) and item.get("role") in ("system", "developer"))


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(str(p.get("text", "")) for p in output if isinstance(p, dict) and "text" in p)
    return json.dumps(output, default=str)


def _images(item: Any) -> int:
    parts = item.get("output") if _is_output(item) else item.get("content") if isinstance(item, dict) else None
    if not isinstance(parts, list):
        return 0
    return sum(1 for p in parts if isinstance(p, dict) and p.get("type") == "input_image")


def _item_text(item: Any) -> str:
    """The item as JSON, images left out (an image costs IMAGE_TOKENS, not its base64 length)."""
    return json.dumps(_without_images(item), ensure_ascii=False, default=str)


def _without_images(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get("type") == "input_image":
            return {"type": "input_image"}
        return {k: _without_images(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_images(v) for v in value]
    return value


def _tool_text(tool: Any) -> str:
    schema = getattr(tool, "params_json_schema", None)
    fields = {"name": getattr(tool, "name", ""), "description": getattr(tool, "description", ""), "parameters": schema}
    return json.dumps(fields, ensure_ascii=False, default=str)

