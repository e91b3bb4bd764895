"""Prompt size and latency of coderoom's first request on a real llama-server (SmolLM2-135M).

Run after `eval "$(bash .ci/llama-setup.sh)"`: `python benchmarks/models_bench.py`. Prints a
Markdown table for docs/models.md: the system prompt the SDK's SandboxAgent would send by default
versus coderoom's, in tokens of the served model (llama-server's /tokenize), and the time to the
first token of a one-token reply to each (prompt evaluation dominates it).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from agents.sandbox.runtime_agent_preparation import get_default_sandbox_instructions  # noqa: E402

from coderoom.agent import BASE_INSTRUCTIONS  # noqa: E402
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
    finally:
        stop_llama(llama)


if __name__ == "__main__":
    main()
