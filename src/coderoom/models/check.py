"""`coderoom models check`: does a model spec work, before a run depends on it?

Each check asks the server itself: reachable and the model listed (`GET /models`, when the
server has it), a forced tool call that round-trips (the named-function `tool_choice`, then
"required": some servers, like this llama.cpp build, ignore "required"; each is reported as it
went), the context size (`server.ServerProbe`) and whether images are accepted (the server's
word, else CODEROOM_MODEL_IMAGES, else the guess from the name). Server text is bounded here and
escaped by the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import openai
from openai.types.chat import ChatCompletionFunctionToolParam

from .base import ResolvedModel, images_override
from .errors import explain_model_error
from .failures import one_line
from .server import ServerFacts

TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "record_number",
        "description": "Record a number.",
        "parameters": {
            "type": "object",
            "properties": {"number": {"type": "integer"}},
            "required": ["number"],
        },
    },
}
ASK = "Call the tool record_number with number 7."
FORCINGS: list[tuple[str, Any]] = [
    ("named", {"type": "function", "function": {"name": "record_number"}}),
    ("required", "required"),
]
MAX_TOKENS = 64
LISTED = 8  # model ids quoted when the model is not among them


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: information only
    detail: str
    required: bool = True


async def check_model(resolved: ResolvedModel, environ: Mapping[str, str]) -> list[Check]:
    """Every check for an openai-compatible model; the caller closes `resolved`."""
    if resolved.api != "chat_completions" or resolved.client is None or resolved.probe is None:
        return [Check("spec", None, f"{resolved.label}: only openai-compatible servers are checked", False)]
    client, name = resolved.client, resolved.probe.model
    checks = await _listed(client, name)
    if checks[0].ok is False:
        return checks
    checks.append(await _tool_call(client, name))
    facts = await resolved.probe.facts()
    checks.append(_context(facts))
    checks.append(_images(facts, resolved, environ))
    return checks


def passed(checks: list[Check]) -> bool:
    return all(c.ok is not False for c in checks if c.required)


async def _listed(client: openai.AsyncOpenAI, name: str) -> list[Check]:
    try:
        page = await client.models.list()
    except openai.NotFoundError:
        return [Check("reachable", True, f"{client.base_url} answers (it has no /models list)")]
    except openai.APIError as exc:
        return [Check("reachable", False, explain_model_error(exc) or one_line(str(exc), 300))]
    ids = [one_line(str(m.id), 80) for m in page.data]
    reachable = Check("reachable", True, f"{client.base_url} answers; {len(ids)} models listed")
    if name in ids:
        return [reachable, Check("model listed", True, name)]
    shown = ", ".join(ids[:LISTED]) + (", …" if len(ids) > LISTED else "")
    return [reachable, Check("model listed", False, f"{name!r} is not among the server's models: {shown or 'none'}")]


async def _tool_call(client: openai.AsyncOpenAI, name: str) -> Check:
    """A forced call, then its result sent back: the server must take both."""
    results = []
    for label, choice in FORCINGS:
        outcome = await _round_trip(client, name, choice)
        results.append(f"tool_choice {label}: {outcome or 'ok'}")
        if outcome is None:
            return Check("forced tool call", True, "; ".join(results))
    return Check("forced tool call", False, "; ".join(results))


async def _round_trip(client: openai.AsyncOpenAI, name: str, choice: Any) -> str | None:
    """None when the call came back and its result was accepted, else what went wrong."""
    messages: list[Any] = [{"role": "user", "content": ASK}]
    try:
        answer = await client.chat.completions.create(
            model=name, messages=messages, tools=[TOOL], tool_choice=choice, max_tokens=MAX_TOKENS, temperature=0
        )
        message = answer.choices[0].message if answer.choices else None
        calls = (message.tool_calls or []) if message is not None else []
        if not calls:
            text = one_line((message.content or "") if message is not None else "", 80)
            return f"ignored (answered in prose: {json.dumps(text, ensure_ascii=False)})"
        call = calls[0]
        function = getattr(call, "function", None)
        if function is None or function.name != "record_number":
            return f"called {one_line(str(getattr(function, 'name', '?')), 60)!r}, not record_number"
        if not isinstance(_json(function.arguments), dict):
            return f"arguments are not a JSON object: {json.dumps(one_line(function.arguments, 80), ensure_ascii=False)}"
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
            {"role": "tool", "tool_call_id": call.id, "content": "recorded"},
        ]
        await client.chat.completions.create(model=name, messages=messages, max_tokens=8, temperature=0)
    except openai.APIError as exc:
        return explain_model_error(exc) or one_line(str(exc), 300)
    return None


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _context(facts: ServerFacts) -> Check:
    if facts.context_size:
        return Check("context size", None, f"{facts.context_size:,} tokens ({facts.context_source})", False)
    return Check("context size", None, "the server does not say; set [model] context_size in the job", False)


def _images(facts: ServerFacts, resolved: ResolvedModel, environ: Mapping[str, str]) -> Check:
    if facts.vision is not None:
        return Check("images", None, f"{'yes' if facts.vision else 'no'} ({facts.kind} says)", False)
    override = images_override(environ)
    if override is not None:
        return Check("images", None, f"{'yes' if override else 'no'} (CODEROOM_MODEL_IMAGES)", False)
    return Check("images", None, f"{'yes' if resolved.accepts_images else 'no'} (guessed from the name)", False)
