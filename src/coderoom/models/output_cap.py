"""How many tokens one model reply may use when the job does not say.

Why: a Chat Completions server generates until the model stops or the context is full, and
without `max_tokens` a small local model that loops can do that for ten minutes per reply
(SmolLM2-135M on llama-server once wrote 5,600 tokens into the 600 s request deadline). So every
Chat Completions request carries a cap: the job's `[model] max_tokens` or `--max-tokens` when
given, else CODEROOM_MODEL_MAX_TOKENS, else a quarter of the context the server reports, at most
DEFAULT_MAX_TOKENS (DEFAULT_MAX_TOKENS when the server does not say). The same figure is what the
context guard keeps free for the reply, so the cap and the trimming budget never disagree.
OpenAI's Responses API gets the cap only from the job, the flag or the variable: its models
stop on their own and reasoning models need their whole budget.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ModelSpecError

DEFAULT_MAX_TOKENS = 1024
ENV = "CODEROOM_MODEL_MAX_TOKENS"


def reply_cap(context_size: int | None) -> int:
    """The default cap for a model with this context (tokens; None: the server does not say)."""
    if context_size is None:
        return DEFAULT_MAX_TOKENS
    return max(1, min(DEFAULT_MAX_TOKENS, context_size // 4))


def max_tokens_from_env(environ: Mapping[str, str]) -> int | None:
    """CODEROOM_MODEL_MAX_TOKENS as a positive number of tokens, or None when unset."""
    raw = environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= 1_000_000:
        raise ModelSpecError(f"{ENV}={raw!r}: expected a whole number of tokens from 1 to 1000000")
    return value
