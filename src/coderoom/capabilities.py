"""Which SDK capabilities (tools) each kind of model can use: one answer for coderoom's own
agent (`agent.build_agent`) and for a program that builds its own `SandboxAgent`.

Why a helper: the SDK's SandboxAgent defaults (Filesystem with the custom `apply_patch` tool,
and Compaction) work only on OpenAI's Responses API; every Chat Completions server (Ollama, vLLM,
llama.cpp, LM Studio, and coderoom's offline analyst) refuses them ("Hosted tools are not
supported"). `capabilities_for(model)` gives every model exec_command (+ write_stdin where the
backend keeps a terminal), run_python and view_image as plain function tools, and a Responses
model also Filesystem and Compaction.
"""

from __future__ import annotations

from agents import FunctionTool, Tool
from agents.sandbox import Manifest
from agents.sandbox.capabilities import Capability, Compaction, Filesystem, Shell

from .models import ResolvedModel
from .sandboxes.limits import Limits
from .tools.bounded import OutputBound, bound_tool
from .tools.shell_results import record_shell

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


def capabilities_for(model: ResolvedModel, limits: Limits | None = None) -> list[Capability]:
    """The tools `model` (from `coderoom.models.resolve_model`) can use in a sandbox with
    `limits` (default: `Limits()`, which bound tool output and the run_python cell timeout):
    exec_command, view_image and run_python for every model; an OpenAI Responses model also
    gets the SDK's default Filesystem (view_image and the custom `apply_patch` tool) and
    Compaction (server-side context compaction), which Chat Completions servers reject, so
    those keep plain function tools only."""
    from .tools.python_kernel import PythonKernel, cell_timeout
    from .tools.view_image import ViewImage

    limits = limits or Limits()
    # figures go back as images to a model that reads them (for Chat Completions, through
    # `images_after_tool_outputs`), else as paths with a short description
    bound = OutputBound(chars=limits.tool_output_chars, saved_bytes=2 * limits.output_bytes)
    kernel = PythonKernel(images=model.accepts_images, timeout=cell_timeout(limits.timeout), bound=bound)
    if model.api == "responses":
        return [SandboxShell(bound=bound), Filesystem(), kernel, Compaction()]
    return [SandboxShell(bound=bound), ViewImage(), kernel]
