"""An agent with one `add` tool on a resolved model, with coderoom's model settings (so the SDK's
runner retries with coderoom's policy); `events` collects what the policy reports."""

from __future__ import annotations

from typing import Any

from agents import Agent, ModelSettings, RunConfig, Runner, RunResult, RunResultStreaming, function_tool

from coderoom.models import ResolvedModel
from coderoom.models.options import ModelOptions
from coderoom.models.settings import model_settings


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def run_agent(
    resolved: ResolvedModel,
    *,
    stream: bool = False,
    options: ModelOptions | None = None,
    events: list[tuple[str, dict[str, Any]]] | None = None,
) -> RunResult | RunResultStreaming:
    def notify(kind: str, **fields: Any) -> None:
        if events is not None:
            events.append((kind, fields))

    if hasattr(resolved.model, "notify"):
        resolved.model.notify = notify
    # The SDK asks non-OpenAI Chat Completions servers for streamed usage only when told to.
    settings = model_settings(
        options or ModelOptions(), resolved.api, notify, resolved.max_retries
    ).resolve(ModelSettings(include_usage=True))
    agent = Agent(
        name="adder",
        instructions="Use the add tool.",
        model=resolved.model,
        model_settings=settings,
        tools=[add],
    )
    config = RunConfig(tracing_disabled=resolved.tracing_disabled)
    try:
        if not stream:
            return await Runner.run(agent, "What is 2 + 3?", run_config=config)
        result = Runner.run_streamed(agent, "What is 2 + 3?", run_config=config)
        async for _ in result.stream_events():
            pass
        return result
    finally:
        await resolved.aclose()
