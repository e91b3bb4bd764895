"""A flood of tool output reaches the model within `tool_output_chars`, head and tail around a
marker that names the cut and the workspace file holding the whole text, on every backend."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from agents.testing import assistant_message, function_call

from coderoom.errors import JobError
from coderoom.jobs import build_job
from coderoom.run import run_job
from core.test_run import scripted, shell

from .harness import events

FLOOD = "head -c 3000000 /dev/urandom | base64"  # 4 MB of text; output_bytes keeps 1 MiB of it


def _job(backend: str, **limits: object):
    return build_job({"name": "t", "prompt": "p", "sandbox": {"backend": backend, "limits": limits}})


def _tool_output_received(model, call_id: str) -> str:
    """The tool result as the model read it: from the input of the model's next call."""
    for call in model.model.calls:
        for item in call.input if isinstance(call.input, list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call_output" and item.get("call_id") == call_id:
                output = item["output"]
                return output if isinstance(output, str) else json.dumps(output)
    raise AssertionError(f"the model never received the result of {call_id}")


def _saved_text(run_dir: Path, name: str) -> str:
    with tarfile.open(run_dir / "workspace.tar") as tar:
        member = next(m for m in tar.getmembers() if m.name.removeprefix("./") == f".coderoom/outputs/{name}")
        data = tar.extractfile(member)
        assert data is not None
        return data.read().decode()


async def test_a_flood_of_shell_output_is_cut_for_the_model_and_saved_whole(backend: str, tmp_path: Path) -> None:
    model = scripted(shell(FLOOD, "flood-1"), [assistant_message("done")])
    result = await run_job(_job(backend), run_dir=tmp_path / "run", model=model)
    assert result.ok, result.error
    received = _tool_output_received(model, "flood-1")
    assert len(received) <= 16_000
    assert "characters cut here; the full output is in /workspace/.coderoom/outputs/flood-1.txt" in received
    saved = _saved_text(tmp_path / "run", "flood-1.txt")
    assert len(saved) > 1_000_000  # the 1 MiB the sandbox captured, not the model's 16,000
    head, _, tail = received.partition("\n[coderoom: ")
    assert saved.startswith(head) and saved.endswith(tail.partition("]\n")[2])
    recorded = next(e for e in events(tmp_path / "run") if e["type"] == "tool_result")
    assert recorded["output"] == received  # the record holds what the model read


async def test_the_bound_is_the_jobs_tool_output_chars_and_covers_run_python(tmp_path: Path) -> None:
    code = "print('x' * 9_000)"  # within the kernel's own 10,000-byte capture per stream
    model = scripted(
        [function_call("run_python", {"code": code}, call_id="py-1")], shell("seq 1 2000", "sh-1"),
        [assistant_message("done")],
    )  # fmt: skip
    result = await run_job(_job("local", tool_output_chars=3000), run_dir=tmp_path / "run", model=model)
    assert result.ok, result.error
    python = _tool_output_received(model, "py-1")
    assert len(python) <= 3000 and ".coderoom/outputs/py-1.txt" in python
    assert "x" * 9_000 in _saved_text(tmp_path / "run", "py-1.txt")
    numbers = _tool_output_received(model, "sh-1")
    assert len(numbers) <= 3000 and numbers.rstrip().endswith("2000")  # the tail is kept
    assert "\n2000\n" in _saved_text(tmp_path / "run", "sh-1.txt")


def test_a_bound_under_the_minimum_is_refused_naming_the_key() -> None:
    with pytest.raises(JobError, match="tool_output_chars") as refused:
        _job("local", tool_output_chars=10)
    assert "1000" in str(refused.value)
