"""Jobs: a folder with coderoom.toml or flags become one validated Job; errors name file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from coderoom.jobs import DEFAULT_INSTRUCTIONS, JobError, build_job, load_job, parse_input_flag


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.csv").write_text("a,b\n1,2\n")
    return tmp_path


def write_job(folder: Path, body: str) -> Path:
    (folder / "coderoom.toml").write_text(body)
    return folder


GOOD = """
prompt = "Summarise input/x.csv"
[inputs]
"input/x.csv" = "data/x.csv"
[[outputs]]
path = "output/summary.md"
[sandbox.limits]
memory = "512M"
timeout = 30
"""


def test_a_job_folder_loads_with_paths_relative_to_it(job_dir: Path) -> None:
    job = load_job(write_job(job_dir, GOOD))
    assert job.inputs == {"input/x.csv": (job_dir / "data" / "x.csv").resolve()}
    assert [o.path for o in job.outputs] == ["output/summary.md"]
    assert job.sandbox.limits.memory == 512 * 1024**2
    assert job.max_turns == 25
    assert job.instructions == DEFAULT_INSTRUCTIONS
    assert job.name == job_dir.name


@pytest.mark.parametrize(
    ("extra", "key", "message"),
    [
        ("colour = 'red'\n", "colour", "unknown key"),
        ("max_turns = 'many'\n", "max_turns", "integer"),
        ("[sandbox.limits]\nmemory = 'lots'\n", "coderoom.toml [sandbox.limits] memory", "not a size"),
        ("[sandbox]\nbogus = 1\n", "sandbox.bogus", "unknown key"),
    ],
)
def test_bad_keys_and_types_name_the_file_and_key(
    job_dir: Path, extra: str, key: str, message: str
) -> None:
    body = 'prompt = "p"\n' + extra
    with pytest.raises(JobError) as error:
        load_job(write_job(job_dir, body))
    text = str(error.value)
    assert str(job_dir / "coderoom.toml") in text
    assert f"{key}: " in text and message in text


def test_a_missing_input_file_is_an_error_naming_the_key(job_dir: Path) -> None:
    body = GOOD.replace("data/x.csv", "data/nope.csv")
    with pytest.raises(JobError, match=r"inputs: 'input/x\.csv': host file .*nope\.csv' does not exist"):
        load_job(write_job(job_dir, body))


def test_missing_prompt_and_bad_toml_are_reported(job_dir: Path) -> None:
    with pytest.raises(JobError, match="prompt: Field required"):
        load_job(write_job(job_dir, "name = 'x'\n"))
    with pytest.raises(JobError, match="not valid TOML"):
        load_job(write_job(job_dir, "prompt = \n"))
    with pytest.raises(JobError, match="no such job file"):
        load_job(job_dir / "elsewhere")


@pytest.mark.parametrize(
    "outputs",
    [["report.md"], ["output/../etc/x"], ["/output/x"], ["output"], ["output/a.md", "output/a.md"]],
)
def test_outputs_must_be_distinct_files_under_output(outputs: list[str]) -> None:
    with pytest.raises(JobError):
        build_job({"prompt": "p", "outputs": outputs})


def test_inputs_may_not_escape_the_workspace_or_land_in_output(job_dir: Path) -> None:
    host = job_dir / "data" / "x.csv"
    for workspace_path in ("../x.csv", "/etc/x.csv", "output/x.csv"):
        with pytest.raises(JobError):
            build_job({"prompt": "p", "inputs": {workspace_path: host}})


def test_flags_build_the_same_job(job_dir: Path) -> None:
    host = job_dir / "data" / "x.csv"
    inputs = dict([parse_input_flag(f"{host}=input/x.csv")])
    job = build_job({"prompt": "p", "inputs": inputs, "outputs": ["output/a.csv"]})
    assert job.inputs == {"input/x.csv": host.resolve()}
    assert parse_input_flag(str(host)) == ("input/x.csv", host)
