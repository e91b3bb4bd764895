"""Running into memory, pids, CPU time or file size tells the model which limit, with its value,
in the command's output, and the user in the record and at the end of `coderoom run`.

Small values keep every case within a few seconds: cpu_time=1 with a busy loop, file_size=1M
writing 2M, pids=32 against 40 sleeping children, memory=64M filling 200M.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from agents.testing import assistant_message

from coderoom.jobs import build_job
from coderoom.run import run_job
from coderoom.sandboxes import Limits, SandboxSpec, get_backend
from coderoom.sandboxes.local import cgroup
from core.test_run import scripted, shell

from .harness import COMMAND, clean_env, events
from openai_server import OpenAIServer, call, say

CASES = {
    "cpu_time": ({"cpu_time": 1}, "while :; do :; done", "[coderoom: stopped by the cpu_time limit (cpu_time = 1 s of CPU per process)]"),
    "file_size": ({"file_size": "1M"}, "head -c 2M /dev/zero > big", "[coderoom: stopped by the file_size limit (file_size = 1M per file)]"),
    "file_size_python": (
        {"file_size": "1M"}, "python3 -c \"open('big', 'wb').write(b'x' * 2**21)\"",
        "[coderoom: probably hit the file_size limit (file_size = 1M per file): a write failed with 'File too large']",
    ),
    "pids": (
        {"pids": 32}, "for i in $(seq 40); do sleep 2 & done; wait",
        "[coderoom: probably hit the pids limit (pids = 32 processes and threads): a process or thread could not be created]",
    ),
}  # fmt: skip
# Both backends count memory in a cgroup, which kills at the limit, and its OOM count says so; the
# local backend without a cgroup bounds each process's address space (an allocation fails).
MEMORY = {
    "local": (
        "[coderoom: probably hit the memory limit (memory = 64M): an allocation failed]"
        if cgroup.mode() is cgroup.Mode.NONE else
        "[coderoom: a process was killed at the sandbox's memory limit (memory = 67108864 bytes, 64 MiB, "
        "counting every process, /tmp, /dev/shm and shared memory)]"
    ),
    "docker": "[coderoom: stopped by the memory limit (memory = 64M for the whole sandbox)]",
}
FILL_200M = "python3 -c \"b = b'x' * (200 * 2**20)\""


async def _run(backend: str, command: str, **limits: object):
    sandbox = await get_backend(backend).start(SandboxSpec(backend=backend, limits=Limits(timeout=30, **limits)))  # type: ignore[arg-type]
    try:
        return await sandbox.exec(["sh", "-c", command])
    finally:
        await sandbox.close()


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_limit_is_named_with_its_value(backend: str, case: str) -> None:
    limits, command, note = CASES[case]
    result = await _run(backend, command, **limits)
    assert result.stderr.decode().rstrip().endswith(note), result.stderr[-500:]
    assert result.stopped_by == note.removeprefix("[coderoom: ").removesuffix("]")


async def test_the_memory_limit_is_named_with_its_value(backend: str) -> None:
    result = await _run(backend, FILL_200M, memory="64M")
    assert result.stderr.decode().rstrip().endswith(MEMORY[backend]), result.stderr[-500:]


async def test_within_the_limits_nothing_is_named(backend: str) -> None:
    result = await _run(backend, "head -c 1M /dev/zero > ok; sleep 0.2 & wait; python3 -c 'x = 1'", file_size="1M", pids=32)
    assert result.ok and result.stopped_by is None and b"[coderoom:" not in result.stderr


async def test_the_record_and_the_run_name_the_limit(backend: str, tmp_path: Path) -> None:
    job = build_job({"name": "t", "prompt": "p", "sandbox": {"backend": backend, "limits": {"cpu_time": 1}}})
    model = scripted(shell("while :; do :; done", "busy"), [assistant_message("done")])
    result = await run_job(job, run_dir=tmp_path / "run", model=model)
    named = "stopped by the cpu_time limit (cpu_time = 1 s of CPU per process)"
    recorded = next(e for e in events(tmp_path / "run") if e["type"] == "tool_result")
    assert f"[coderoom: {named}]" in recorded["output"]  # what the model read
    assert result.limits_hit == [named]
    assert events(tmp_path / "run")[-1]["limits_hit"] == [named]


def test_coderoom_run_ends_by_naming_the_limit(tmp_path: Path) -> None:
    with OpenAIServer([call("exec_command", cmd="head -c 2M /dev/zero > big"), say("done")]) as server:
        argv = [*COMMAND, "run", "--model", f"openai-compatible:scripted@{server.url}", "--out", str(tmp_path / "run"), "hello"]
        job = tmp_path / "coderoom.toml"
        job.write_text('prompt = "hello"\n[sandbox.limits]\nfile_size = "1M"\n')
        argv[argv.index("hello")] = str(tmp_path)
        done = subprocess.run(argv, cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "sandbox limit: stopped by the file_size limit (file_size = 1M per file)" in " ".join(done.stderr.split())
