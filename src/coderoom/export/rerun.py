"""`coderoom rerun RUN_DIR`: the same analysis on the same or new inputs, with no model.

The replay script (`export.script`) runs in a fresh sandbox whose workspace holds the run's
inputs (from run_start.job.inputs, each replaceable with `--input HOST=WORKSPACE`); the declared
outputs come back through `save_workspace` (safe extraction), beside `workspace.tar` and the
replay's log, so a rerun directory looks like a run directory.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from agents.sandbox import Manifest

from ..jobs import Job, build_job
from ..outputs import OutputCheck
from ..artifacts import check_on_host, save_workspace
from ..sandboxes.session import open_session
from ..workspace import stage_inputs
from . import REPLAY_TIMEOUT
from .script import build_script
from .steps import load_steps

REPLAY_PATH = ".coderoom/replay.py"
LOG_FILE = "replay.log"


@dataclass
class RerunResult:
    out_dir: Path
    exit_code: int
    checks: list[OutputCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and all(c.ok for c in self.checks)


def rerun_job(run_dir: Path, inputs: dict[str, Path], backend: str | None, timeout: float) -> Job:
    """The recorded job with replaced inputs and a sandbox whose per-command limit fits the
    whole replay (it is one command)."""
    start, _ = load_steps(run_dir)
    data = dict(start["job"])
    recorded = {k: Path(v) for k, v in (data.get("inputs") or {}).items()}
    data["inputs"] = {**recorded, **inputs}
    job = build_job(data, source=f"{run_dir}/run.jsonl")
    limits = job.sandbox.limits.model_copy(update={"timeout": max(job.sandbox.limits.timeout, timeout)})
    spec = job.sandbox.model_copy(update={"limits": limits, **({"backend": backend} if backend else {})})
    return job.model_copy(update={"sandbox": spec})


async def rerun(
    run_dir: Path,
    out_dir: Path,
    *,
    inputs: dict[str, Path] | None = None,
    backend: str | None = None,
    timeout: float = REPLAY_TIMEOUT,
) -> RerunResult:
    """Replay `run_dir` in a fresh sandbox; outputs, workspace.tar and replay.log go to `out_dir`."""
    job = rerun_job(run_dir, inputs or {}, backend, timeout)
    start, steps = load_steps(run_dir)
    script = build_script(start, steps).encode("utf-8")
    out_dir.mkdir(parents=True, exist_ok=True)
    async with open_session(job.sandbox, Manifest()) as session:
        await stage_inputs(session, job.inputs)
        await session.mkdir(Path(REPLAY_PATH).parent, parents=True)
        await session.write(Path(REPLAY_PATH), io.BytesIO(script))
        done = await session.exec("python3", "-I", REPLAY_PATH, shell=False, timeout=timeout)
        notes = (await save_workspace(session, out_dir, job.sandbox.limits.workspace_size, job.outputs)).notes
    log = done.stdout + (b"\n--- stderr ---\n" + done.stderr if done.stderr else b"")
    (out_dir / LOG_FILE).write_bytes(log)
    return RerunResult(out_dir, done.exit_code, check_on_host(out_dir, job.outputs), notes)
