"""The `coderoom` command as a user meets it: clear job errors, a run with progress and an artifact
table, a readable transcript, and Ctrl-C that leaves no sandbox behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openai_server import OpenAIServer, call, say

COMMAND = [sys.executable, "-m", "coderoom"]


def coderoom(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def clean_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "CODEROOM_MODEL"))}
    env["CODEROOM_MODEL_MAX_RETRIES"] = "0"
    return env


def test_a_bad_job_file_exits_2_naming_file_and_key(tmp_path: Path) -> None:
    (tmp_path / "coderoom.toml").write_text('prompt = "p"\nmax_turn = 3\n')
    result = coderoom("run", str(tmp_path))
    assert result.returncode == 2
    assert "coderoom.toml" in result.stderr and "max_turn: unknown key" in result.stderr


def test_a_flag_job_runs_shows_artifacts_and_a_transcript(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("a\n1\n")
    script = [call("exec_command", cmd="mkdir -p output && cp input/d.csv output/copy.csv"), say("Copied it.")]
    with OpenAIServer(script) as server:
        result = coderoom(
            "run", "--input", f"{data}=input/d.csv", "--output", "output/copy.csv",
            "--model", f"openai-compatible:scripted@{server.url}", "--out", str(tmp_path / "run"),
            "Copy the file", env=clean_env(tmp_path),
        )
    assert result.returncode == 0, result.stderr
    assert "exec_command" in result.stderr and "mkdir -p output" in result.stderr
    assert "output/copy.csv" in result.stdout and "csv: 1 rows, 1 columns" in result.stdout
    assert "Copied it." in result.stdout
    shown = coderoom("show", str(tmp_path / "run"))
    assert shown.returncode == 0
    assert "cp input/d.csv output/copy.csv" in shown.stdout and "run ok" in shown.stdout


def test_missing_outputs_exit_1(tmp_path: Path) -> None:
    with OpenAIServer([say("I did nothing.")] * 3) as server:
        result = coderoom(
            "run", "--output", "output/x.md", "--model", f"openai-compatible:scripted@{server.url}",
            "--out", str(tmp_path / "run"), "Write output/x.md", env=clean_env(tmp_path),
        )
    assert result.returncode == 1
    assert "output/x.md (missing" in result.stderr


def _leftovers(backend: str, host_pid: int | None = None) -> set[str]:
    """The run's containers, or local sandbox host folders and the bwrap processes using them."""
    if backend == "docker":
        label = f"coderoom.host-pid={host_pid}" if host_pid else "coderoom.sandbox"
        listing = ["docker", "ps", "-aq", "--filter", f"label={label}"]
        return set(subprocess.run(listing, capture_output=True, text=True).stdout.split())
    # by lease, so other runs on this machine (tests in parallel) never count
    from faults.harness import local_folders, processes_using

    folders = local_folders(host_pid) if host_pid else set()
    return {str(f) for f in folders} | {str(pid) for pid in processes_using(folders)}


def test_ctrl_c_closes_the_sandbox_and_leaves_nothing(backend: str, tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    before = _leftovers(backend)
    script = [call("exec_command", cmd="sleep 60"), say("never")]
    with OpenAIServer(script) as server:
        process = subprocess.Popen(
            [*COMMAND, "run", "--sandbox", backend, "--output", "output/x.md",
             "--model", f"openai-compatible:scripted@{server.url}", "--out", str(tmp_path / "run"), "wait"],
            stderr=subprocess.PIPE, text=True, env=env,
        )
        assert process.stderr is not None
        deadline = time.monotonic() + 60
        seen = []
        for line in process.stderr:
            seen.append(line)
            if "sleep 60" in line or time.monotonic() > deadline:
                break
        time.sleep(1)
        during = _leftovers(backend, process.pid)
        assert during - before, "the probe must see the live sandbox, or its later silence proves nothing"
        process.send_signal(signal.SIGINT)
        rest = process.communicate(timeout=30)[1]
    assert process.returncode == 130, "".join(seen) + rest
    assert "interrupted" in rest
    assert _leftovers(backend, process.pid) <= (set() if backend == "docker" else before)


@pytest.mark.parametrize(
    ("target", "cwd", "suggestion"),
    [
        ("examples/building_energ", ".", "examples/building_energy"),
        ("building_energ", "examples", "building_energy"),
        ("examples/nothing_like_it", ".", None),
        ("examples/building_energy.toml", ".", None),
    ],
    ids=["path-typo", "word-typo", "no-near-folder", "missing-toml"],
)
def test_a_mistyped_job_folder_exits_2_with_a_suggestion_and_no_run_folder(
    tmp_path: Path, target: str, cwd: str, suggestion: str | None
) -> None:
    job = tmp_path / "examples" / "building_energy"
    job.mkdir(parents=True)
    (job / "coderoom.toml").write_text('prompt = "p"\n')
    result = coderoom("run", target, env=clean_env(tmp_path), cwd=tmp_path / cwd)
    assert result.returncode == 2, result.stderr
    message = " ".join(result.stderr.split())
    assert f"no job folder '{target}';" in message
    if suggestion is not None:
        assert f"did you mean '{suggestion}'?" in message
    assert not list(tmp_path.rglob("run.jsonl")) and not (tmp_path / cwd / "runs").exists()


def test_a_one_word_prompt_far_from_any_folder_is_still_a_prompt(tmp_path: Path) -> None:
    (tmp_path / "examples").mkdir()
    result = coderoom("run", "summarise", "--out", str(tmp_path / "run"), env=clean_env(tmp_path), cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the offline analyst refuses it: a run, not a usage error
    assert (tmp_path / "run" / "run.jsonl").is_file()


def test_a_command_past_the_wall_clock_ends_the_run_naming_the_flag_that_raises_it(tmp_path: Path) -> None:
    """A 157 MB CSV once ended after 116 s with no hint that `--timeout` exists."""
    script = [call("exec_command", cmd="sleep 30"), say("It was too slow.")]
    with OpenAIServer(script) as server:
        result = coderoom(
            "run", "--model", f"openai-compatible:scripted@{server.url}", "--timeout", "1",
            "--out", str(tmp_path / "run"), "Wait for it", env=clean_env(tmp_path),
        )
    stderr = " ".join(result.stderr.split())
    assert "sandbox limit: the 1 s wall-clock limit; raise it with --timeout SECONDS (or --limit timeout=SECONDS)" in stderr
