"""Resolve `--model` to an SDK Model: openai (Responses), openai-compatible (Chat Completions),
offline."""

from __future__ import annotations

from .errors import explain_model_error
from .openai import DEFAULT_MODEL
from .resolve import resolve_model
from .base import ResolvedModel

__all__ = ["DEFAULT_MODEL", "ResolvedModel", "explain_model_error", "resolve_model"]
