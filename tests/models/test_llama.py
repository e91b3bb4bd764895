"""coderoom against a real llama.cpp server with SmolLM2-135M (a tiny model that makes real
mistakes): the server accepts every request coderoom builds, a history holding a garbage tool
call is repaired before it is sent, and a whole run ends within a bounded time with a clear
status, a complete record and the context never exceeded."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from agents import ModelSettings, ModelTracing
from agents.run_config import CallModelData, ModelInputData

from coderoom.agent import base_instructions
from coderoom.jobs import build_job
from coderoom.models import resolve_model
from coderoom.models.profile import input_filter
from coderoom.record import read_record
from coderoom.run import run_job
from llama_server import LlamaServer

GARBAGE_HISTORY: list[Any] = [
    {"role": "user", "content": "List the files."},
    {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": '{"cmd": "ls'},
    {"type": "function_call_output", "call_id": "c1", "output": "arguments were not valid JSON"},
]


async def test_a_history_with_an_unparseable_tool_call_is_accepted_after_repair(llama: LlamaServer) -> None:
    resolved = resolve_model(llama.spec, environ={"CODEROOM_MODEL_MAX_RETRIES": "0"})
    data = CallModelData(model_data=ModelInputData(input=GARBAGE_HISTORY, instructions="x"), agent=None, context=None)  # type: ignore[arg-type]
    repaired = input_filter(resolved)(data)
    assert repaired.input[1]["arguments"] == "{}" and GARBAGE_HISTORY[1]["arguments"] == '{"cmd": "ls'
    try:
        response = await resolved.model.get_response(
            base_instructions(resolved), repaired.input, ModelSettings(max_tokens=8), [], None, [],
            ModelTracing.DISABLED, previous_response_id=None, conversation_id=None, prompt=None,
        )
    finally:
        await resolved.aclose()
    # answered (not refused); a reply cut at 8 tokens is asked once to finish: two requests
    assert response.usage.requests in (1, 2) and response.usage.output_tokens > 0


async def test_a_run_ends_in_bounded_time_with_a_clear_status_and_a_complete_record(
    llama: LlamaServer, tmp_path: Path
) -> None:
    data = tmp_path / "sales.csv"
    data.write_text("month,revenue\n2024-01,10\n2024-02,12\n")
    job = build_job({
        "name": "llama",
        "prompt": "Count the rows of input/sales.csv and write the number to output/count.txt.",
        "inputs": {"input/sales.csv": data},
        "outputs": ["output/count.txt"],
        "model": {"spec": llama.spec, "tool_choice": "required", "max_tokens": 24, "temperature": 0},
        "max_turns": 2,
    })
    environ = {**os.environ, "CODEROOM_MODEL_MAX_RETRIES": "1", "CODEROOM_MODEL_TIMEOUT": "120"}
    started = time.monotonic()

    result = await run_job(job, run_dir=tmp_path / "run", environ=environ)

    assert time.monotonic() - started < 600
    events = read_record(result.run_dir).events
    kinds = [e.type for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end" and kinds.count("run_end") == 1
    end = events[-1]
    assert end.status in ("ok", "failed") and (end.status == "ok") == (end.error is None)
    assert end.usage.requests >= 1 and end.usage.model_dump() == result.usage
    calls = [e for e in events if e.type == "model_call"]
    assert calls and all(c.usage.input_tokens + 24 <= llama.n_ctx for c in calls)
    # the server never refused coderoom's request for its form or size
    assert not [e for e in events if e.type == "model_retry" and e.status is not None]
    assert "exceeds the available context size" not in llama.log.read_text()
    assert not (result.run_dir / "output/count.txt").exists() or end.status == "ok"
