"""Resolve `--model` to an SDK Model: openai (Responses), openai-compatible (Chat Completions),
offline. The names below load on first use, so `coderoom.models.options` (what `jobs` reads)
imports without the Agents SDK."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import ResolvedModel
    from .errors import explain_model_error
    from .openai import DEFAULT_MODEL
    from .resolve import resolve_model

_LAZY = {
    "DEFAULT_MODEL": ".openai",
    "ResolvedModel": ".base",
    "explain_model_error": ".errors",
    "resolve_model": ".resolve",
}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
