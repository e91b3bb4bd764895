"""The agent coderoom runs: its instructions, tools, model settings and per-call input filters.

Why coderoom writes its own base prompt: the SDK's SandboxAgent default (`agents/sandbox/
instructions/prompt.md`, ~17,800 characters, ~4,000 tokens) describes a coding assistant with
approvals, AGENTS.md files and `rg`, which coderoom's sandboxes do not offer, and `apply_patch`,
which only Responses models get; on a 4k-context local server it does not even fit. `SandboxAgent.base_instructions` is the SDK's
supported override: the SDK still appends the job's instructions, each capability's
instructions and the workspace layout after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents import RunConfig
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

from .capabilities import capabilities_for
from .jobs import Job, OutputSpec
from .models import ResolvedModel
from .models.profile import input_filter, tool_error_message
from .models.failures import Notify
from .models.settings import model_settings

BASE_INSTRUCTIONS = (
    "You work in a sandbox: a Linux machine with a workspace at /workspace and no network. "
    "Act only through the tools you are given; call them with arguments that are a JSON object "
    "matching the tool's schema. Look at the input files before you analyse them, compute every "
    "figure you report, and save what was asked for under /workspace/output. "
    "When the work is done, answer with a short summary of what you found and which files you wrote."
)
# Chat Completions models are often small local ones: one step at a time keeps them on track.
CHAT_ADDENDUM = " Make one tool call at a time and read its result before the next."


def base_instructions(model: ResolvedModel) -> str:
    return BASE_INSTRUCTIONS + (CHAT_ADDENDUM if model.api == "chat_completions" else "")


def output_contract(outputs: Sequence[OutputSpec]) -> str:
    if not outputs:
        return ""
    listing = "\n".join(f"- {o.path}" for o in outputs)
    return (
        "\n\nThe workspace root is /workspace. Before you finish, these files must exist there "
        f"and be valid for their type:\n{listing}"
    )


def packages_note(packages: Sequence[str]) -> str:
    """The declared packages (`[sandbox.environment]`), so the model uses them rather than
    working around a package it believes is missing."""
    if not packages:
        return ""
    return f"\n\nAlso installed in the sandbox's Python, for this job: {', '.join(packages)}."


def build_agent(job: Job, model: ResolvedModel, notify: Notify) -> SandboxAgent[Any]:
    """`notify(event_type, **fields)` reports retries and cut replies (the run's recorder)."""
    settings = model_settings(job.model_settings, model.api, notify, model.max_retries)
    return SandboxAgent(
        name=job.name,
        base_instructions=base_instructions(model),
        instructions=job.instructions + packages_note(job.sandbox.environment.packages) + output_contract(job.outputs),
        model=model.agent_model(notify, job.model_settings.context_size),
        model_settings=settings,
        default_manifest=Manifest(),
        capabilities=capabilities_for(model, job.sandbox.limits),
    )


def build_run_config(model: ResolvedModel, session: BaseSandboxSession) -> RunConfig:
    return RunConfig(
        sandbox=SandboxRunConfig(session=session),
        tracing_disabled=model.tracing_disabled,
        call_model_input_filter=input_filter(model),
        # a made-up tool name or invalid arguments go back to the model as that call's result,
        # costing it a turn, instead of ending the run
        tool_not_found_behavior="return_error_to_model",
        tool_error_formatter=tool_error_message,
    )
