"""Prompt size and latency of coderoom's first request on a real llama-server (SmolLM2-135M).

Run after `eval "$(bash .ci/llama-setup.sh)"`: `python benchmarks/models_bench.py`. Prints a
Markdown table for docs/models.md: the system prompt the SDK's SandboxAgent would send by default
versus coderoom's, in tokens of the served model (llama-server's /tokenize), and the time to the
first token of a one-token reply to each (prompt evaluation dominates it). Then one whole
coderoom job on that server (tool_choice "required", max_tokens 64, max_turns 4): prompt and
output tokens per turn, as the server counted them, and the turns the job took.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agents.sandbox.runtime_agent_preparation import get_default_sandbox_instructions  # noqa: E402

from coderoom.agent import BASE_INSTRUCTIONS  # noqa: E402
from coderoom.jobs import build_job  # noqa: E402
from coderoom.record import read_record  # noqa: E402
from coderoom.run import run_job  # noqa: E402
from llama_server import start_llama, stop_llama  # noqa: E402


def main() -> None:
    prompts = {"SDK default (before)": get_default_sandbox_instructions() or "", "coderoom (after)": BASE_INSTRUCTIONS}
    llama = start_llama(Path(tempfile.mkdtemp()) / "llama.log", n_ctx=8192)
    try:
        print("| system prompt | characters | tokens | time to first token (s) |")
        print("|---|---:|---:|---:|")
        for name, text in prompts.items():
            started = time.monotonic()
            llama.post("/v1/chat/completions", {
                "model": "smollm2", "max_tokens": 1, "cache_prompt": False,
                "messages": [{"role": "system", "content": text}, {"role": "user", "content": "Hi"}],
            })
            ttft = time.monotonic() - started
            print(f"| {name} | {len(text):,} | {llama.count_tokens(text):,} | {ttft:.2f} |")
        print()
        job_turns(llama.spec)
    finally:
        stop_llama(llama)


def job_turns(spec: str) -> None:
    """One whole job on the server: tokens per turn and turns per job, from the run's record."""
    folder = Path(tempfile.mkdtemp())
    data = folder / "sales.csv"
    data.write_text("month,revenue\n2024-01,10\n2024-02,12\n2024-03,9\n")
    job = build_job({
        "name": "bench", "prompt": "Count the data rows of input/sales.csv and write the number to output/count.txt.",
        "inputs": {"input/sales.csv": data}, "outputs": ["output/count.txt"], "max_turns": 4,
        "model": {"spec": spec, "tool_choice": "required", "max_tokens": 64, "temperature": 0},
    })  # fmt: skip
    started = time.monotonic()
    result = asyncio.run(run_job(job, run_dir=folder / "run", environ=dict(os.environ)))
    calls = [e for e in read_record(result.run_dir).events if e.type == "model_call"]
    print("| turn | prompt tokens | output tokens | seconds |")
    print("|---:|---:|---:|---:|")
    for call in calls:
        print(f"| {call.turn} | {call.usage.input_tokens:,} | {call.usage.output_tokens:,} | {call.duration_s:.2f} |")
    print(f"\nturns per job: {len(calls)} (status {result.status}, {time.monotonic() - started:.1f} s in all)")


if __name__ == "__main__":
    main()
