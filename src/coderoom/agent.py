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

from agents import FunctionTool, RunConfig, Tool
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Capability, Compaction, Filesystem, Shell
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

from .jobs import Job, OutputSpec
from .models import ResolvedModel
from .models.profile import input_filter, tool_error_message
from .models.failures import Notify
from .models.settings import model_settings
from .tools.bounded import OutputBound, bound_tool
from .tools.shell_results import record_shell

BASE_INSTRUCTIONS = (
    "You work in a sandbox: a Linux machine with a workspace at /workspace and no network. "
    "Act only through the tools you are given; call them with arguments that are a JSON object "
    "matching the tool's schema. Look at the input files before you analyse them, compute every "
    "figure you report, and save what was asked for under /workspace/output. "
    "When the work is done, answer with a short summary of what you found and which files you wrote."
)
# Chat Completions models are often small local ones: one step at a time keeps them on track.
CHAT_ADDENDUM = " Make one tool call at a time and read its result before the next."

SHELL_INSTRUCTIONS = (
    "Use `exec_command` to run shell commands (cwd /workspace); a long output is cut, its full "
    "text saved in a file the cut names, so print summaries, not whole files."
)
PTY_INSTRUCTIONS = " Poll a running command's session ID with `write_stdin`; type into a tty=true one with it."


class SandboxShell(Shell):
    """The SDK's Shell tools with instructions that name only what this sandbox offers (no `rg`,
    and `write_stdin` only where the backend keeps a terminal), their results bounded and each
    call's result kept for the record (`tools.shell_results`)."""

    bound: OutputBound = OutputBound()

    def tools(self) -> list[Tool]:
        assert self.session is not None  # the SDK's Shell.tools refuses an unbound capability
        session, bound = self.session, self.bound
        return [bound_tool(record_shell(t), session, bound) if isinstance(t, FunctionTool) else t
                for t in super().tools()]

    async def instructions(self, manifest: Manifest) -> str | None:
        pty = self.session is not None and self.session.supports_pty()
        return SHELL_INSTRUCTIONS + (PTY_INSTRUCTIONS if pty else "")


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


def capabilities(model: ResolvedModel, job: Job) -> list[Capability]:
    """The tools the model gets: exec_command, view_image and run_python for every model; an
    OpenAI Responses model also gets the SDK's default Filesystem (view_image and the custom
    `apply_patch` tool) and Compaction (server-side context compaction), which Chat Completions
    servers reject, so those keep plain function tools only."""
    from .tools.python_kernel import PythonKernel, cell_timeout
    from .tools.view_image import ViewImage

    # figures go back as images to a model that reads them (for Chat Completions, through
    # `images_after_tool_outputs`), else as paths with a short description
    limits = job.sandbox.limits
    bound = OutputBound(chars=limits.tool_output_chars, saved_bytes=2 * limits.output_bytes)
    kernel = PythonKernel(images=model.accepts_images, timeout=cell_timeout(limits.timeout), bound=bound)
    if model.api == "responses":
        return [SandboxShell(bound=bound), Filesystem(), kernel, Compaction()]
    return [SandboxShell(bound=bound), ViewImage(), kernel]


def build_agent(job: Job, model: ResolvedModel, notify: Notify) -> SandboxAgent[Any]:
    """`notify(event_type, **fields)` reports retries and cut replies (the run's recorder)."""
    settings = model_settings(job.model_settings, model.api, notify, model.max_retries)
    return SandboxAgent(
        name=job.name,
        base_instructions=base_instructions(model),
        instructions=job.instructions + output_contract(job.outputs),
        model=model.agent_model(notify, job.model_settings.context_size),
        model_settings=settings,
        default_manifest=Manifest(),
        capabilities=capabilities(model, job),
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
