"""Read the conversation the Runner hands to a model: the prompt, the analyst's calls and their results.

The prompt is the latest request: the latest user message that is not a run's nudge about
missing outputs (`models.nudge`), so a follow-up in a live session is read as the new request it
is, and a nudge as a reminder of the old one.

The offline analyst keeps no state between calls; everything it knows comes from these items, so
a resumed or replayed run takes the same decisions. Items arrive as Responses-style dicts (or SDK
pydantic objects, which are dumped to the same dicts).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..nudge import is_nudge

_EXIT = re.compile(r"^Process exited with code (-?\d+)$", re.MULTILINE)
_RUNNING = re.compile(r"^Process running with session ID (\d+)$", re.MULTILINE)
_HEADER = "\nOutput:\n"


@dataclass
class Call:
    """One tool call of the analyst, with every chunk of output it produced (polls included)."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    outputs: list[str] = field(default_factory=list)

    @property
    def step(self) -> str:
        """The state-machine step, encoded in the call id as `cr-<step>-<n>`."""
        parts = self.call_id.split("-")
        return parts[1] if len(parts) >= 3 and parts[0] == "cr" else ""

    @property
    def done(self) -> bool:
        return bool(self.outputs) and running_session(self.outputs[-1]) is None


@dataclass
class Transcript:
    prompt: str  # the latest request (a user message that is not a nudge)
    requests: int  # user messages that are not nudges: more than one means a follow-up
    nudges: int  # nudges since the latest request
    calls: list[Call]  # calls since the last user message, polls folded into their command
    assistant_texts: list[str]
    total_calls: int  # every call in the conversation, for unique call ids

    def step(self, name: str) -> Call | None:
        found = [c for c in self.calls if c.step == name]
        return found[-1] if found else None


def _as_dict(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    return dump(exclude_unset=False) if callable(dump) else {}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text(part) for part in content)
    if isinstance(content, dict):
        return str(content.get("text") or content.get("output") or "")
    return ""


def read_transcript(items: str | Iterable[Any]) -> Transcript:
    """Fold the item list into the analyst's view of the conversation."""
    if isinstance(items, str):
        return Transcript(items, 1, 0, [], [], 0)
    prompt, requests, nudges, total = "", 0, 0, 0
    calls: list[Call] = []
    by_id: dict[str, Call] = {}
    polls: dict[str, Call] = {}  # poll call id -> the command it polls
    texts: list[str] = []
    for raw in items:
        item = _as_dict(raw)
        kind = item.get("type") or ("message" if "role" in item else "")
        if kind == "message" and item.get("role") == "user":
            text = _text(item.get("content"))
            if is_nudge(text) and requests:
                nudges += 1
            else:
                prompt, requests, nudges = text, requests + 1, 0
            calls, by_id, polls = [], {}, {}
        elif kind == "message" and item.get("role") == "assistant":
            texts.append(_text(item.get("content")))
        elif kind == "function_call":
            total += 1
            call_id = str(item.get("call_id") or item.get("id") or "")
            try:
                args = json.loads(item.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            call = Call(call_id, str(item.get("name") or ""), args if isinstance(args, dict) else {})
            if call.name == "write_stdin" and calls:
                polls[call_id] = calls[-1]
            else:
                calls.append(call)
            by_id[call_id] = call
        elif kind == "function_call_output":
            call_id = str(item.get("call_id") or "")
            target = polls.get(call_id) or by_id.get(call_id)
            if target is not None:
                target.outputs.append(_text(item.get("output")))
    return Transcript(prompt, requests, nudges, calls, texts, total)


def exit_code(output: str) -> int | None:
    found = _EXIT.findall(output)
    return int(found[-1]) if found else None


def running_session(output: str) -> int | None:
    """The PTY session id when the command was still running as the tool returned."""
    if exit_code(output) is not None:
        return None
    found = _RUNNING.findall(output)
    return int(found[-1]) if found else None


def body(output: str) -> str:
    """What the command printed, without the exec_command header (chunk id, wall time, ...)."""
    return output.split(_HEADER, 1)[1] if _HEADER in output else output


def call_text(call: Call) -> str:
    return "".join(body(o) for o in call.outputs)


def call_exit(call: Call) -> int | None:
    for output in reversed(call.outputs):
        code = exit_code(output)
        if code is not None:
            return code
    return None


def marker(text: str, mark: str) -> dict[str, Any] | None:
    """The JSON on the last line starting with `mark`, as printed by the analyst's scripts."""
    for line in reversed(text.splitlines()):
        if line.startswith(mark + " "):
            try:
                value = json.loads(line[len(mark) + 1:])
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None
