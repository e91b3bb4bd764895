"""Fixtures for the kernel tests: a real sandbox session per test, with the kernel tool bound to it.

The kernel suite runs on every coderoom backend (the one `backend` fixture of tests/conftest.py);
all of them keep a process alive between commands, so a session that cannot fails the test rather
than skipping it (a backend without processes is not offered run_python at all, see
`test_capability_hides_tool_without_processes`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from agents.sandbox import Manifest
from agents.sandbox.session.sandbox_session import SandboxSession

from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session
from coderoom.tools.python_kernel import RunPythonTool, keeps_processes


@pytest.fixture
def kernel_backend(backend: str) -> str:
    """The suite's backend: the shared fixture, under the name the kernel tests use."""
    return backend


@pytest.fixture
async def session(kernel_backend: str) -> AsyncIterator[SandboxSession]:
    async with open_session(SandboxSpec(backend=kernel_backend), Manifest()) as live:
        if not keeps_processes(live):  # every backend here keeps one: losing it is a regression
            pytest.fail(f"{kernel_backend}: the session cannot keep a process between commands")
        yield live


@pytest.fixture
def tool(session: SandboxSession) -> RunPythonTool:
    return RunPythonTool(session, images=True, timeout=20)


@pytest.fixture
def quick_tool(session: SandboxSession) -> RunPythonTool:
    """A short per-call limit, for the timeout tests."""
    return RunPythonTool(session, images=True, timeout=1)
