"""A forged past run of many events, as a long working session leaves: turns of Python cells with
their code, output, protocol lines and messages; for measuring how the page renders and scrolls."""

from __future__ import annotations

import json
from pathlib import Path

EVENTS_PER_TURN = 4  # model_start, model_call, tool_start, tool_result


def forge_long_run(runs_dir: Path, name: str, events: int = 1_000) -> Path:
    """`runs_dir/name` with a record of `events` events between run_start and run_end."""
    run = runs_dir / name
    (run / "output").mkdir(parents=True)
    job = {"name": "long", "prompt": "a long session", "inputs": {}, "outputs": []}
    lines: list[dict[str, object]] = [{"type": "run_start", "t": 0, "record_version": 2, "job": job, "model": "offline"}]
    for turn in range(1, events // EVENTS_PER_TURN + 1):
        code = "\n".join([f"# step {turn}", "import pandas as pd", f"frame = pd.DataFrame({{'x': range({turn})}})"]
                         + [f"total_{i} = frame['x'].sum() * {i}  # a longer cell" for i in range(turn % 20)])
        stdout = "".join(f"row {i}: {turn * i}\n" for i in range(12)) + f'CODEROOM_RESULT {{"turn": {turn}}}\n'
        call = {"call_id": f"c{turn}", "name": "run_python", "arguments": {"code": code}}
        lines += [
            {"type": "model_start", "t": turn, "turn": turn},
            {"type": "model_call", "t": turn, "turn": turn, "output": [
                {"kind": "message", "text": f"Step {turn}: **summing** the `x` column, then checking it."},
                {"kind": "tool_call", **call}]},
            {"type": "tool_start", "t": turn, **call},
            {"type": "tool_result", "t": turn, **call, "output": stdout,
             "cell": {"number": turn, "status": "ok", "duration_s": 0.01, "stdout": stdout}},
        ]  # fmt: skip
    lines.append({"type": "run_end", "t": events, "status": "ok", "final_output": "Done: **all** steps ran."})
    (run / "run.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run
