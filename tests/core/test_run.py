"""A run: the agent works in the sandbox, required outputs are checked, a missing one earns a
nudge, everything produced is saved, and the record tells the whole story."""

from __future__ import annotations

import asyncio
import json
import tarfile
from pathlib import Path

import pytest
from agents.testing import ScriptedModel, assistant_message, function_call

from coderoom.jobs import build_job
from coderoom.models import ResolvedModel
from coderoom.record import read_record
from coderoom.run import run_job

def scripted(*steps: list) -> ResolvedModel:
    return ResolvedModel(
        model=ScriptedModel(steps),
        label="scripted",
        api="offline",
        accepts_images=False,
        tracing_disabled=True,
    )


def shell(cmd: str, call_id: str) -> list:
    return [function_call("exec_command", {"cmd": cmd}, call_id=call_id)]


@pytest.fixture
def job(tmp_path: Path, backend: str):
    data = tmp_path / "x.csv"
    data.write_text("a,b\n1,2\n3,4\n")
    return build_job(
        {
            "name": "t",
            "prompt": "copy the data",
            "inputs": {"input/x.csv": data},
            "outputs": ["output/copy.csv", "output/note.md"],
            "sandbox": {"backend": backend},
        }
    )


async def test_outputs_are_checked_extracted_and_recorded(job, tmp_path: Path) -> None:
    model = scripted(
        shell("mkdir -p output && cp input/x.csv output/copy.csv && echo '# done' > output/note.md", "c1"),
        [assistant_message("Copied.")],
    )
    result = await run_job(job, run_dir=tmp_path / "run", model=model)
    assert result.ok, result.error
    assert (tmp_path / "run/output/copy.csv").read_text() == "a,b\n1,2\n3,4\n"
    assert [c.detail for c in result.checks] == ["csv: 2 rows, 2 columns", "text: 1 lines"]
    events = read_record(tmp_path / "run").events
    kinds = [e.type for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end"
    call = next(e for e in events if e.type == "tool_result")
    assert call.name == "exec_command" and "cp input/x.csv" in call.arguments["cmd"]
    with tarfile.open(tmp_path / "run/workspace.tar") as tar:
        names = tar.getnames()
    assert any(n.endswith("input/x.csv") for n in names)
    assert events[-1].status == "ok" and events[-1].final_output == "Copied."


async def test_a_missing_output_earns_a_nudge_naming_it(job, tmp_path: Path) -> None:
    model = scripted(
        shell("mkdir -p output && cp input/x.csv output/copy.csv", "c1"),
        [assistant_message("Done (forgot the note).")],
        shell("echo '# note' > output/note.md", "c2"),
        [assistant_message("Now both.")],
    )
    result = await run_job(job, run_dir=tmp_path / "run", model=model)
    assert result.ok, result.error
    nudge_input = model.model.calls[2].input
    assert "output/note.md: missing" in json.dumps(nudge_input)
    nudges = [e for e in read_record(tmp_path / "run").events if e.type == "nudge"]
    assert nudges == [nudges[0]] and nudges[0].missing[0].path == "output/note.md"


async def test_still_missing_fails_clearly_and_keeps_what_was_made(job, tmp_path: Path) -> None:
    model = scripted(
        shell("mkdir -p output && cp input/x.csv output/copy.csv && printf 'a,b\\n' > output/bad.csv", "c1"),
        *[[assistant_message("I will not write the note.")]] * 3,
    )
    result = await run_job(job, run_dir=tmp_path / "run", model=model)
    assert result.status == "failed"
    assert "output/note.md (missing" in result.error
    assert (tmp_path / "run/output/copy.csv").exists()
    assert (tmp_path / "run/output/bad.csv").exists()


async def test_a_symlinked_output_is_not_followed_to_the_host(job, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("sk-canary-HOSTFILE")
    model = scripted(
        shell(f"mkdir -p output && ln -s {secret} output/copy.csv && echo hi > output/note.md", "c1"),
        *[[assistant_message("done")]] * 3,
    )
    result = await run_job(job, run_dir=tmp_path / "run", model=model)
    assert result.status == "failed"
    copy = tmp_path / "run/output/copy.csv"
    assert not copy.exists() and not copy.is_symlink()
    assert b"sk-canary" not in (tmp_path / "run/run.jsonl").read_bytes()


async def test_model_errors_end_the_run_with_a_clear_message_and_no_sandbox_left(job, tmp_path: Path) -> None:
    model = scripted(RuntimeError("provider exploded"))
    result = await run_job(job, run_dir=tmp_path / "run", model=model)
    assert result.status == "error" and "provider exploded" in result.error
    assert read_record(tmp_path / "run").events[-1].status == "error"


async def test_cancellation_closes_the_session(job, tmp_path: Path, monkeypatch) -> None:
    from coderoom.sandboxes import session as registry

    closed: list[bool] = []
    original = registry._close_and_delete

    async def spy(client, session):
        await original(client, session)
        closed.append(True)

    monkeypatch.setattr(registry, "_close_and_delete", spy)
    model = scripted(shell("sleep 30", "c1"), [assistant_message("never")])
    task = asyncio.create_task(run_job(job, run_dir=tmp_path / "run", model=model))
    await asyncio.sleep(2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert closed == [True]
    assert read_record(tmp_path / "run").events[-1].status == "interrupted"


async def test_a_run_never_writes_into_a_folder_with_earlier_results(job, tmp_path: Path) -> None:
    from coderoom.errors import RunDirInUse

    stale = tmp_path / "run" / "output" / "copy.csv"
    stale.parent.mkdir(parents=True)
    stale.write_text("a,b\n1,2\n")
    with pytest.raises(RunDirInUse, match="not empty"):
        await run_job(job, run_dir=tmp_path / "run", model=scripted([assistant_message("hi")]))
    assert stale.read_text() == "a,b\n1,2\n"
