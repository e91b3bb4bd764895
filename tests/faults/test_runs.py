"""Run folders never collide, limits are named with their values, tiny sizes and clashing
inputs are refused before a run, and a workspace over its limit still keeps the outputs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from agents.testing import assistant_message
from backends import require_backend

from coderoom.jobs import build_job
from coderoom.run import run_job
from core.test_run import scripted, shell

from .harness import COMMAND, clean_env, events
from openai_server import OpenAIServer, say

CONCURRENT_RUNS = 8  # processes started within the same second on 2 cores: enough to collide on a name made of the time


def test_concurrent_runs_without_out_get_distinct_folders(tmp_path: Path) -> None:
    with OpenAIServer([say("done")] * CONCURRENT_RUNS) as server:
        argv = [*COMMAND, "run", "--model", f"openai-compatible:scripted@{server.url}", "hello"]
        runs = [
            subprocess.Popen(argv, cwd=tmp_path, env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(CONCURRENT_RUNS)
        ]
        failures = [(p.wait(timeout=180), p.stderr.read()) for p in runs if p.wait(timeout=180) != 0]  # type: ignore[union-attr]
    assert not failures, failures
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == CONCURRENT_RUNS
    assert all(events(f)[-1]["status"] == "ok" for f in folders)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--memory", "1"], "memory = 1 bytes is under the 16M minimum; a plain number is bytes"),
        (["--input", "{data}=input", "--input", "{data}=input/x.csv"], "'input' is a file, so 'input/x.csv' cannot be placed inside it"),
    ],
)
def test_bad_limits_and_clashing_inputs_exit_2_before_any_run_folder(
    flags: list[str], message: str, tmp_path: Path
) -> None:
    data = tmp_path / "x.csv"
    data.write_text("a\n1\n")
    argv = [*COMMAND, "run", "--model", "offline", *[f.format(data=data) for f in flags], "hello"]
    done = subprocess.run(argv, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert message in " ".join(done.stderr.split())
    assert not (tmp_path / "runs").exists()


def _job(tmp_path: Path, backend: str, **limits: object):
    return build_job(
        {"name": "t", "prompt": "p", "outputs": ["output/note.md"], "sandbox": {"backend": backend, "limits": limits}}
    )


async def test_over_the_workspace_limit_the_outputs_and_record_are_kept(tmp_path: Path) -> None:
    model = scripted(
        shell("mkdir -p output && echo '# kept' > output/note.md", "c1"),
        shell("head -c 3000000 /dev/zero > big.bin", "c2"),
        [assistant_message("done")],
    )
    result = await run_job(_job(tmp_path, "local", workspace_size="2M"), run_dir=tmp_path / "run", model=model)
    big = next(e for e in events(tmp_path / "run") if e["type"] == "tool_result" and e["call_id"] == "c2")
    assert "workspace_size limit of 2097152 bytes" in big["output"]  # the model is told which limit, with its value
    assert (tmp_path / "run/output/note.md").read_text() == "# kept\n"
    assert result.ok, result.error
    end = events(tmp_path / "run")[-1]
    assert end["saved"] == ["output/note.md"]
    refusal = next(e for e in events(tmp_path / "run") if e["type"] == "extract_refused")
    assert "workspace.tar: not saved" in refusal["detail"] and "2,097,152 bytes" in refusal["detail"]


async def test_a_symlinked_output_is_named_in_the_nudge_and_the_table(backend: str, tmp_path: Path) -> None:
    model = scripted(
        shell("mkdir -p output && ln -s /etc/hostname output/note.md", "c1"),
        [assistant_message("done")],
        [assistant_message("still done")],
        [assistant_message("really done")],
    )
    result = await run_job(_job(tmp_path, backend), run_dir=tmp_path / "run", model=model)
    nudge = next(e for e in events(tmp_path / "run") if e["type"] == "nudge")
    assert nudge["missing"] == [{"path": "output/note.md", "reason": "a symlink: an output must be a regular file"}]
    assert result.status == "failed"
    assert result.checks[0].detail == "not saved: a link that leaves the tree"  # the exit policy's reason (hostile.exits)


async def test_a_workspace_filled_past_memory_on_docker_keeps_the_run(tmp_path: Path) -> None:
    """Attack B08: tmpfs pages count against the container's memory but belong to no process;
    filled past the memory limit, the kernel OOM-killed PID 1 and the run lost its outputs. The
    workspace tmpfs is capped below the memory limit, so the write fails with ENOSPC instead."""
    require_backend("docker")
    model = scripted(
        shell("mkdir -p output && echo '# kept' > output/note.md", "c1"),
        shell("head -c 300M /dev/zero > big; echo exit=$?", "c2"),
        [assistant_message("done")],
    )
    job = _job(tmp_path, "docker", memory="256M")
    result = await run_job(job, run_dir=tmp_path / "run", model=model)
    assert result.ok, result.error
    assert (tmp_path / "run/output/note.md").read_text() == "# kept\n"
    big = next(e for e in events(tmp_path / "run") if e["type"] == "tool_result" and e["call_id"] == "c2")
    assert "No space left" in big["output"] and "exit=1" in big["output"]
