"""The README's "From the Agents SDK" program runs as written (its code block is cut out of
README.md and run, so the README cannot drift), and `capabilities_for` is the one place that says
which SDK capabilities each kind of model gets: coderoom's own agent takes them from it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from agents.sandbox.capabilities import Compaction, Filesystem

from coderoom import capabilities_for
from coderoom.agent import build_agent
from coderoom.capabilities import SandboxShell
from coderoom.jobs import build_job
from coderoom.models import resolve_model
from coderoom.sandboxes.limits import Limits
from coderoom.tools.python_kernel import PythonKernel
from coderoom.tools.view_image import ViewImage

ROOT = Path(__file__).resolve().parents[2]


def readme_sdk_program() -> str:
    section = (ROOT / "README.md").read_text().split("## From the Agents SDK", 1)[1].split("\n## ", 1)[0]
    [program] = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return program


def test_the_readme_sdk_program_runs_with_the_offline_analyst(tmp_path: Path) -> None:
    program = tmp_path / "sdk_program.py"
    program.write_text(readme_sdk_program())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}
    done = subprocess.run([sys.executable, str(program)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONPATH": str(ROOT / "src")}, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "found 6 abnormal event(s)" in done.stdout
    assert "Files written and checked: output/anomalies.csv" in done.stdout


def kinds(capabilities: list) -> list[type]:
    return [type(c) for c in capabilities]


def test_chat_completions_models_get_plain_function_tools_and_responses_models_the_sdk_defaults() -> None:
    chat = resolve_model("offline")
    responses = resolve_model("openai:gpt-5.4", environ={"OPENAI_API_KEY": "sk-canary-not-a-key"})
    assert kinds(capabilities_for(chat)) == [SandboxShell, ViewImage, PythonKernel]
    assert kinds(capabilities_for(responses)) == [SandboxShell, Filesystem, PythonKernel, Compaction]
    limits = Limits(timeout=7, tool_output_chars=1234)
    [shell, _, kernel] = capabilities_for(chat, limits)
    assert shell.bound.chars == 1234 and kernel.bound.chars == 1234


def test_coderoom_s_own_agent_takes_its_capabilities_from_the_same_helper() -> None:
    job = build_job({"prompt": "p", "sandbox": {"limits": Limits(tool_output_chars=4321)}})
    for model in (resolve_model("offline"), resolve_model("openai:gpt-5.4", environ={"OPENAI_API_KEY": "sk-canary"})):
        agent = build_agent(job, model, notify=lambda *a, **k: None)
        assert kinds(agent.capabilities) == kinds(capabilities_for(model, job.sandbox.limits))
        assert agent.capabilities[0].bound.chars == 4321
