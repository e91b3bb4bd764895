"""What a batch will run, decided before anything runs: a manifest's rows become jobs as a job
folder would (the shared settings plus each row), a bad row or a clash of names is a usage error
naming it, and `--resume` reads batch.jsonl with bounds, as it would any file others can write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coderoom.batch.ledger import LEDGER_FILE, JobEnded, JobStarted, Ledger, read_ledger
from coderoom.batch.manifest import batch_entries
from coderoom.batch.runner import plan_batch
from coderoom.errors import JobError, RecordError, UsageError

SHARED = 'name = "meters"\nmodel = "offline"\nmax_turns = 7\n[[outputs]]\npath = "output/report.md"\n'


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "a.csv").write_text("t,v\n")
    (tmp_path / "b.csv").write_text("t,v\n")
    (tmp_path / "shared.toml").write_text(SHARED)
    return tmp_path


def test_csv_rows_add_their_prompt_inputs_and_outputs_to_the_shared_settings(folder: Path) -> None:
    manifest = folder / "jobs.csv"
    manifest.write_text(
        "name,prompt,inputs,outputs\n"
        "north,Look at both,a.csv=input/a.csv; b.csv,output/n.csv\n"
        ",Look at a,a.csv=input/a.csv,\n"
    )
    north, second = batch_entries([manifest], folder / "shared.toml")
    assert north.key == "north" and north.source == f"{manifest} row 1"
    assert north.job.inputs == {"input/a.csv": folder / "a.csv", "input/b.csv": folder / "b.csv"}
    assert [o.path for o in north.job.outputs] == ["output/report.md", "output/n.csv"]
    assert (north.job.model, north.job.max_turns, north.job.prompt) == ("offline", 7, "Look at both")
    assert second.key == "meters-2" and [o.path for o in second.job.outputs] == ["output/report.md"]


def test_jsonl_rows_give_inputs_as_an_object(folder: Path) -> None:
    manifest = folder / "jobs.jsonl"
    manifest.write_text(json.dumps({"prompt": "p", "inputs": {"input/x.csv": "a.csv"}, "outputs": ["output/x.md"]}) + "\n")
    (entry,) = batch_entries([manifest], folder / "shared.toml")
    assert entry.job.inputs == {"input/x.csv": folder / "a.csv"} and entry.key == "meters-1"


@pytest.mark.parametrize(
    ("suffix", "text", "said"),
    [
        (".csv", "name,prompt,inputs\na,p,missing.csv=input/m.csv\n", "row 1: invalid job"),
        (".csv", "name,prompt,colour\na,p,red\n", "unknown column 'colour'"),
        (".csv", "name,prompt\na,p,extra\n", "row 1: more cells than columns"),
        (".csv", "name,prompt\n", "no rows; a row is a job"),
        (".jsonl", '{"prompt": "p"}\n{"prompt": "p", "colour": 1}\n', "row 2: field 'colour': unknown"),
        (".jsonl", '{"prompt": "p"}\n[1]\n', "row 2: a row is a JSON object"),
        (".jsonl", '{"prompt": 3}\n', "row 1: field 'prompt': expected text"),
        (".jsonl", '{"prompt": "p", "outputs": "output/x.md"}\n', "row 1: field 'outputs': expected a list"),
        (".jsonl", '{"name": "a", "prompt": "p"}\n{"name": "a", "prompt": "q"}\n', "row 2: the job name 'a' is also"),
    ],
    ids=["missing-input", "unknown-column", "extra-cell", "no-rows", "unknown-field", "not-an-object", "prompt-type",
         "outputs-type", "same-name"],
)
def test_a_bad_row_is_a_usage_error_naming_the_row_and_the_field(folder: Path, suffix: str, text: str, said: str) -> None:
    manifest = folder / f"jobs{suffix}"
    manifest.write_text(text)
    with pytest.raises(JobError) as refused:
        batch_entries([manifest], folder / "shared.toml")
    assert said in str(refused.value) and str(manifest) in str(refused.value)
    assert refused.value.exit_code == 2


def test_a_row_without_a_prompt_anywhere_names_the_field(folder: Path) -> None:
    (folder / "shared.toml").write_text('model = "offline"\n')
    manifest = folder / "jobs.csv"
    manifest.write_text("name,inputs\na,a.csv\n")
    with pytest.raises(JobError, match=r"row 1: invalid job\n  prompt: Field required"):
        batch_entries([manifest], folder / "shared.toml")


def test_job_folders_need_distinct_names_and_no_job_file(folder: Path) -> None:
    for name in ("one", "two"):
        (folder / name).mkdir()
        (folder / name / "coderoom.toml").write_text('name = "same"\nprompt = "p"\n')
    with pytest.raises(JobError, match="the job name 'same' is also"):
        batch_entries([folder / "one", folder / "two"])
    with pytest.raises(JobError, match="--job-file is for a manifest's rows"):
        batch_entries([folder / "one"], folder / "shared.toml")
    with pytest.raises(JobError, match="neither a job folder"):
        batch_entries([folder / "a.csv.txt"])


def _line(job: str = "a", **fields: object) -> str:
    base = {"job": job, "digest": "0" * 64, "run_dir": f"{job}-1", "t": 1.0, "event": "end", "status": "ok",
            "duration_s": 1.0, "outputs_ok": 1, "outputs": 1, "tokens": 5, "error": None, "signal": None}  # fmt: skip
    return json.dumps({**base, **fields}) + "\n"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (_line(run_dir="../../etc"), "line 2: end.run_dir"),
        (_line(job="../x"), "line 2: end.job"),
        (_line(t=float("nan")), "line 2: end.t"),
        (_line(status="great"), "line 2: end.status"),
        (_line(tokens=-1), "line 2: end.tokens"),
        (_line(error="x" * 10_000), "line 2: end.error"),
        (_line(owner="me"), "line 2: end.owner"),
        ("{" * 70_000 + "\n", "line 2: longer than 65,536 bytes"),
        ("not json\n", "line 2: the line: Invalid JSON"),
    ],
    ids=["run-dir-escape", "job-name", "nan-time", "status", "negative", "long-error", "extra-field", "long-line", "not-json"],
)
def test_resume_refuses_a_forged_ledger_line_naming_it(tmp_path: Path, line: str, said: str) -> None:
    (tmp_path / LEDGER_FILE).write_text(_line() + line)
    with pytest.raises(RecordError) as refused:
        read_ledger(tmp_path)
    assert said in str(refused.value)


def test_a_last_line_cut_by_a_kill_is_left_out(tmp_path: Path) -> None:
    (tmp_path / LEDGER_FILE).write_text(_line() + _line("b")[:40])
    assert [line.job for line in read_ledger(tmp_path)] == ["a"]


def test_the_ledger_writes_what_it_reads(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    written = [JobStarted(job="a", digest="1" * 64, run_dir="a-1", t=2.5),
               JobEnded(job="a", digest="1" * 64, run_dir="a-1", t=3.5, status="interrupted", duration_s=1.0,
                        outputs_ok=0, outputs=2, tokens=9, error="stopped: é", signal="SIGTERM")]  # fmt: skip
    for line in written:
        ledger.write(line)
    ledger.close()
    assert read_ledger(tmp_path) == written
    assert (tmp_path / LEDGER_FILE).read_bytes().isascii()


def test_resume_skips_only_jobs_that_ended_ok_with_the_same_settings(folder: Path) -> None:
    manifest = folder / "jobs.jsonl"
    manifest.write_text("".join(json.dumps({"name": n, "prompt": "p"}) + "\n" for n in ("ok", "failed", "changed", "new")))
    entries = {e.key: e for e in batch_entries([manifest], folder / "shared.toml")}
    (folder / "out").mkdir()
    (folder / "out" / LEDGER_FILE).write_text(
        _line("ok", digest=entries["ok"].digest, run_dir="ok-9")
        + _line("failed", digest=entries["failed"].digest, status="failed")
        + _line("changed", digest="f" * 64)
    )
    plan = plan_batch(list(entries.values()), folder / "out", resume=True)
    assert [e.key for e in plan.to_run] == ["failed", "changed", "new"]
    assert [(o.key, o.run_dir, o.earlier) for o in plan.earlier] == [("ok", "ok-9", True)]


def test_a_batch_folder_is_resumed_only_when_asked(folder: Path) -> None:
    (folder / "out").mkdir()
    with pytest.raises(UsageError, match="--resume: .* holds no batch.jsonl"):
        plan_batch([], folder / "out", resume=True)
    (folder / "out" / LEDGER_FILE).write_text("")
    with pytest.raises(UsageError, match="holds a batch already"):
        plan_batch([], folder / "out", resume=False)
