"""The shell tools the model sees on every backend: exec_command and write_stdin, with
instructions that say how a long command becomes a session (capabilities.SandboxShell)."""

from __future__ import annotations

from agents.sandbox import Manifest

from coderoom.capabilities import PTY_INSTRUCTIONS, SandboxShell
from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session


async def test_every_backend_offers_write_stdin_and_says_how_to_use_it(backend: str) -> None:
    async with open_session(SandboxSpec(backend=backend), Manifest()) as session:
        shell = SandboxShell()
        shell.bind(session)
        assert [tool.name for tool in shell.tools()] == ["exec_command", "write_stdin"]
        instructions = await shell.instructions(session.state.manifest)
        assert instructions is not None and instructions.endswith(PTY_INSTRUCTIONS)
