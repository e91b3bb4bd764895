"""A run directory made without a model: the real tools (run_python, exec_command, view_image) driven
in order in a real sandbox session, recorded with coderoom's own Recorder and recording hooks, the
workspace saved as a run saves it. The exporters' input is this file format, so the steps are scripted, the outputs real.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
from agents.sandbox import Manifest
from agents.sandbox.capabilities.tools import ViewImageTool
from agents.tool_context import ToolContext

from coderoom.capabilities import SandboxShell
from coderoom.jobs import build_job
from coderoom.record import Recorder
from coderoom.record.hooks import RecordingHooks
from coderoom.artifacts import save_workspace
from coderoom.sandboxes.session import open_session
from coderoom.tools.python_kernel import RunPythonTool
from coderoom.workspace import stage_inputs
from backends import fake_without_bubblewrap

OUTPUTS = ["output/anomalies.csv", "output/plot.png", "output/report.md", "output/state.txt"]

ANALYSIS = (
    "threshold = df['energy_kwh'].mean() + 2 * df['energy_kwh'].std()\n"
    "anomalies = df[df['energy_kwh'] > threshold]\n"
    "anomalies.to_csv('output/anomalies.csv', index=False)\n"
    "fig, ax = plt.subplots(figsize=(6, 3))\n"
    "ax.plot(df['energy_kwh'].to_numpy())\n"
    "ax.set_title('energy')\n"
    "fig.savefig('output/plot.png')\n"
    "len(anomalies)"
)


def write_energy_csv(path: Path, *, spikes: list[int], hours: int = 24 * 14) -> Path:
    """An hourly series with a daily cycle and spikes at the given hours."""
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["timestamp", "energy_kwh", "outdoor_temp_c"])
        for hour in range(hours):
            energy = 50 + 10 * math.sin(2 * math.pi * hour / 24) + (80 if hour in spikes else 0)
            stamp = f"2024-03-{1 + hour // 24:02d} {hour % 24:02d}:00:00"
            writer.writerow([stamp, f"{energy:.2f}", f"{10 + 5 * math.cos(hour / 7):.1f}"])
    return path


def shell_tools(session: Any) -> dict[str, Any]:
    """The shell tools a run's agent gets (exec_command, and write_stdin where the backend keeps
    a terminal), by name."""
    shell = SandboxShell()
    shell.bind(session)
    return {tool.name: tool for tool in shell.tools()}


async def record_session(run_dir: Path, data: Path, backend: Any = None) -> None:
    """`backend`: an object to run the session on instead of local (the fake), named in the record."""
    job = build_job(
        {
            "name": "kernel_showcase",
            "prompt": "Find the spikes in input/energy.csv.",
            "inputs": {"input/energy.csv": data},
            "outputs": OUTPUTS,
            "model": "offline",
            "sandbox": {"backend": "local"},
        }
    )
    if backend is not None:
        job = job.model_copy(update={"sandbox": job.sandbox.model_copy(update={"backend": backend.name})})
    recorder = Recorder(run_dir)
    hooks = RecordingHooks(recorder)
    recorder.emit("run_start", job=job.model_dump(mode="json"), model="scripted", coderoom_version="test")
    async with open_session(job.sandbox, Manifest(), backend=backend) as session:
        await stage_inputs(session, job.inputs)
        tools: dict[str, Any] = {
            "run_python": RunPythonTool(session, images=True, timeout=20),
            "quick_python": RunPythonTool(session, images=True, timeout=1),
            "exec_command": shell_tools(session)["exec_command"],
            "view_image": ViewImageTool(session=session),
        }
        calls: list[tuple[str, dict[str, Any]]] = [
            ("exec_command", {"cmd": "mkdir -p output && wc -l input/energy.csv"}),
            ("run_python", {"code": "import pandas as pd\nimport matplotlib.pyplot as plt\n"
                            "df = pd.read_csv('input/energy.csv')\ndf.shape"}),
            ("run_python", {"code": "df['missing_column']"}),
            ("run_python", {"code": ANALYSIS}),
            ("exec_command", {"cmd": "printf 'spikes: %s\\n' $(($(wc -l < anomalies.csv) - 1)) "
                              "> report.md", "workdir": "output"}),
            ("quick_python", {"code": "import time\nwhile True:\n    time.sleep(0.05)"}),
            ("view_image", {"path": "output/plot.png"}),
            ("run_python", {"code": "import os\nos.abort()"}),
            ("run_python", {"code": "open('output/state.txt', 'w').write(str('df' in globals()))"}),
        ]
        for number, (name, arguments) in enumerate(calls, 1):
            call_id = f"call-{number}"
            tool = tools[name]
            recorder.emit(
                "model_call", turn=number, output=[
                    {"kind": "message", "text": f"Step {number}: using {tool.name}."},
                    {"kind": "tool_call", "call_id": call_id, "name": tool.name, "arguments": arguments},
                ],
            )  # fmt: skip
            context = ToolContext(None, tool_name=tool.name, tool_call_id=call_id, tool_arguments=json.dumps(arguments))
            await hooks.on_tool_start(context, None, tool)  # type: ignore[arg-type]
            result = await tool.on_invoke_tool(context, context.tool_arguments)
            await hooks.on_tool_end(context, None, tool, result)  # type: ignore[arg-type]
        for note in (await save_workspace(session, run_dir, job.sandbox.limits.workspace_size)).notes:
            recorder.emit("extract_refused", detail=note)
    recorder.emit("run_end", status="ok", final_output="done", error=None, outputs=[])
    recorder.close()


@pytest.fixture(scope="session")
def kernel_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded run that used every tool; its inputs live beside it."""
    base = tmp_path_factory.mktemp("kernel_run")
    data = write_energy_csv(base / "energy.csv", spikes=[30, 100, 200])
    run_dir = base / "run"
    asyncio.run(record_session(run_dir, data))
    return run_dir


@pytest.fixture(scope="session")
def kernel_run_on_fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same recorded run on the fake backend, bubblewrap unusable meanwhile: for exporters,
    which read the record and the saved workspace, not the sandbox."""
    base = tmp_path_factory.mktemp("kernel_run_on_fake")
    data = write_energy_csv(base / "energy.csv", spikes=[30, 100, 200])
    run_dir = base / "run"
    with pytest.MonkeyPatch.context() as patch:
        asyncio.run(record_session(run_dir, data, fake_without_bubblewrap(patch)))
    return run_dir
