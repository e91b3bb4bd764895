"""`--model` → an SDK Model. The part before ':' names the provider; a bare name is an OpenAI model.

Forms: `gpt-5.4` / `openai:gpt-5.4` (Responses API), `openai-compatible:MODEL@BASE_URL` (Chat
Completions), `offline`. With no spec: CODEROOM_MODEL if set, else OpenAI's DEFAULT_MODEL when
OPENAI_API_KEY is set, else `offline` with a notice. Third-party providers register a callable
`(rest: str, environ: Mapping[str, str]) -> ResolvedModel` in the `coderoom.models` entry points.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points

from ..errors import ModelSpecError
from . import openai as openai_provider
from .base import ResolvedModel

Provider = Callable[[str, Mapping[str, str]], ResolvedModel]

_BUILTIN = {
    "openai": "coderoom.models.openai:resolve",
    "openai-compatible": "coderoom.models.compatible:resolve",
    "offline": "coderoom.models.resolve:resolve_offline",
}
# OpenAI's own names may contain ':' (fine-tunes: ft:gpt-4o-mini:org::id); they are not providers.
_OPENAI_NAME_PREFIXES = {"ft"}
OFFLINE_NOTICE = (
    "no --model given and OPENAI_API_KEY is not set: using the offline analyst "
    "(deterministic, no LLM); for a real model pass --model NAME "
    "or --model openai-compatible:MODEL@BASE_URL"
)


def resolve_model(spec: str | None, *, environ: Mapping[str, str] | None = None) -> ResolvedModel:
    """Build the model `spec` names; a bad spec is a ValueError naming it and the expected form."""
    env = os.environ if environ is None else environ
    text = (spec or "").strip()
    notice = None
    if not text:
        text, notice = _default_spec(env)
    prefix, _, rest = text.partition(":")
    # a built-in needs no scan of every installed distribution's entry points (~15 ms of each
    # session's open): no plugin can shadow one (`_providers`)
    providers = _BUILTIN if prefix in _BUILTIN else _providers()
    if prefix in providers:
        resolved = _load(providers[prefix])(rest, env)
    elif ":" in text and prefix not in _OPENAI_NAME_PREFIXES:
        known = ", ".join(providers)
        raise ModelSpecError(
            f"model {text!r}: unknown provider {prefix!r}; known providers: {known} "
            "(an OpenAI model name needs no prefix)"
        )
    else:
        resolved = openai_provider.resolve(text, env)
    if notice is not None:
        resolved.notice = notice if resolved.notice is None else f"{notice}; {resolved.notice}"
    return resolved


def resolve_offline(rest: str, environ: Mapping[str, str]) -> ResolvedModel:
    if rest.strip():
        raise ModelSpecError(f"model 'offline:{rest}': offline takes no arguments; expected 'offline'")
    from .offline import OfflineAnalyst  # imported only when asked for: it is a whole policy

    return ResolvedModel(
        model=OfflineAnalyst(),
        label="offline",
        api="offline",
        accepts_images=False,
        tracing_disabled=True,
    )


def _default_spec(env: Mapping[str, str]) -> tuple[str, str | None]:
    configured = env.get("CODEROOM_MODEL", "").strip()
    if configured:
        return configured, None
    if env.get("OPENAI_API_KEY", "").strip():
        return f"openai:{openai_provider.DEFAULT_MODEL}", None
    return "offline", OFFLINE_NOTICE


def _providers() -> dict[str, str | Callable[[], Provider]]:
    """Built-ins first; a plugin cannot shadow them."""
    found: dict[str, str | Callable[[], Provider]] = {
        ep.name: ep.load for ep in entry_points(group="coderoom.models")
    }
    return {**found, **_BUILTIN}


def _load(target: str | Callable[[], Provider]) -> Provider:
    if callable(target):
        return target()
    module_name, attribute = target.split(":")
    return getattr(importlib.import_module(module_name), attribute)
