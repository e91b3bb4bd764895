"""What a job may say about its model's requests: the `[model]` table, validated. Pydantic only:
`jobs` reads it without loading the Agents SDK."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Api = Literal["responses", "chat_completions", "offline"]


class ModelOptions(BaseModel):
    """What a job may set about the model's requests (`[model]` in coderoom.toml); None = default."""

    model_config = ConfigDict(extra="forbid")

    tool_choice: str | None = Field(default=None, description="auto, required, none or a tool name")
    max_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    parallel_tool_calls: bool | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    extra_body: dict[str, Any] | None = None
    context_size: int | None = Field(
        default=None, ge=512, description="tokens; used when the server does not say (llama.cpp /props, Ollama /api/show)"
    )
