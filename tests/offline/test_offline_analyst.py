"""The offline analyst: it works only through the sandbox tools, finds the showcase's injected events,
reads files it has never seen, gives the same answer twice, and says so when it cannot do a job."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from agents import RunConfig, Runner
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Shell

from support.evaluation import score_files
from coderoom.jobs import Job, build_job, load_job
from coderoom.models.offline import OfflineAnalyst
from coderoom.models.offline.policy import script
from coderoom.models.offline.request import parse_request
from coderoom.record import read_record
from coderoom.run import run_job
from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session
from coderoom.workspace import stage_inputs

BACKEND = os.environ.get("CODEROOM_TEST_BACKEND", "local")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "building_energy"


def offline(job: Job) -> Job:
    return job.model_copy(update={"model": "offline", "sandbox": SandboxSpec(backend=BACKEND)})


def tool_calls(run_dir: Path) -> list[dict]:
    return [
        {"call_id": out.call_id, "name": out.name, "arguments": out.arguments}
        for rec in read_record(run_dir).events
        if rec.type == "model_call"
        for out in rec.output
        if out.kind == "tool_call"
    ]


@pytest.fixture(scope="module")
def showcase(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The showcase job, run twice by the offline analyst in the real sandbox."""
    base = tmp_path_factory.mktemp("showcase")
    job = offline(load_job(EXAMPLE))
    for name in ("a", "b"):
        result = asyncio.run(run_job(job, run_dir=base / name))
        assert result.ok, (result.error, result.final_output)
    return base / "a", base / "b"


def test_showcase_events_are_found(showcase: tuple[Path, Path]) -> None:
    score = score_files(EXAMPLE / "ground_truth.csv", showcase[0] / "output/anomalies.csv")
    assert score.recall >= 0.9, score
    assert score.precision >= 0.8, score


def test_showcase_report_is_plain_ascii_and_explains(showcase: tuple[Path, Path]) -> None:
    report = (showcase[0] / "output/anomaly_report.md").read_bytes()
    text = report.decode("ascii")  # raises on any non-ASCII byte, the degree sign included
    assert "degrees C" in text
    assert "## Method" in text and "MAD" in text
    events = pd.read_csv(showcase[0] / "output/anomalies.csv")
    assert text.count("Plausible explanation:") == len(events)
    assert "Easter Monday" in text  # the holiday closure is recognised from its date
    assert (showcase[0] / "output/energy_anomalies.png").read_bytes()[:4] == b"\x89PNG"


def test_showcase_is_deterministic(showcase: tuple[Path, Path]) -> None:
    a, b = showcase
    assert tool_calls(a) == tool_calls(b)
    for name in ("anomalies.csv", "energy_anomalies.png", "anomaly_report.md"):
        assert (a / "output" / name).read_bytes() == (b / "output" / name).read_bytes(), name
    finals = [[r.final_output for r in read_record(d).events if r.type == "run_end"] for d in (a, b)]
    assert finals[0] == finals[1]


def test_analyst_acts_only_through_the_sandbox_tools_and_leaves_its_code(showcase: tuple[Path, Path]) -> None:
    run_dir = showcase[0]
    calls = tool_calls(run_dir)
    steps = [(c["call_id"].split("-")[1], c["name"]) for c in calls]
    assert steps == [("list", "exec_command"), ("install", "exec_command"), ("profile", "run_python"),
                     ("analyse", "run_python"), ("verify", "run_python")]
    with tarfile.open(run_dir / "workspace.tar") as tar:
        for name in ("profile.py", "analyse.py", "verify.py"):
            names = {n.removeprefix("./"): n for n in tar.getnames()}
            member = tar.extractfile(names[f".coderoom/{name}"])
            assert member is not None
            assert member.read().decode().rstrip() == script(name).rstrip()


def test_generator_reproduces_the_committed_files(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(EXAMPLE / "generate.py"), "--out", str(tmp_path / "d.csv"),
         "--truth", str(tmp_path / "t.csv")],
        check=True, capture_output=True,
    )
    assert (tmp_path / "d.csv").read_bytes() == (EXAMPLE / "data/building_energy.csv").read_bytes()
    assert (tmp_path / "t.csv").read_bytes() == (EXAMPLE / "ground_truth.csv").read_bytes()


def test_request_parsing() -> None:
    text = parse_request(
        (EXAMPLE / "coderoom.toml").read_text().split('prompt = """', 1)[1].split('"""')[0]
    )
    assert text.outputs == (
        "output/anomalies.csv", "output/energy_anomalies.png", "output/anomaly_report.md"
    )
    assert text.inputs == ("input/building_energy.csv",)
    assert text.wants_anomalies
    other = parse_request(
        "Plot data/x.tsv to ./output/fig.png, not ../output/a.csv nor output/../etc/passwd.",
        instructions="These files must exist:\n- output/summary.md",
    )
    assert other.outputs == ("output/fig.png", "output/summary.md")
    assert other.inputs == ("data/x.tsv",)
    assert not other.wants_anomalies


def _meter_csv(path: Path) -> tuple[str, str]:
    """Half-hourly power, semicolons, decimal commas, day-first dates, no temperature, one spike."""
    rng = np.random.default_rng(3)
    stamps = pd.date_range("2023-10-02", periods=6 * 7 * 48, freq="30min")
    hour = stamps.hour + stamps.minute / 60
    working = (stamps.day_of_week < 5) & (hour >= 7) & (hour < 19)
    power = 20 + 35 * working + rng.normal(0, 1.5, stamps.size)
    spike = (stamps >= "2023-10-25 01:00") & (stamps <= "2023-10-25 04:30")
    power[spike] += 40
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, delimiter=";")
        w.writerow(["Zeitpunkt", "Leistung_kW", "Status"])
        for i, (t, p) in enumerate(zip(stamps, power)):
            w.writerow([t.strftime("%d/%m/%Y %H:%M"), "" if i == 500 else f"{p:.2f}".replace(".", ","),
                        "ok"])
    return "2023-10-25 01:00", "2023-10-25 04:30"


async def test_unfamiliar_format_is_detected_not_assumed(tmp_path: Path) -> None:
    start, end = _meter_csv(tmp_path / "meter.csv")
    job = build_job({
        "name": "meter",
        "model": "offline",
        "prompt": "Here is input/meter.csv from a sub-meter. Find unusual consumption and save "
                  "output/events.csv and output/notes.md.",
        "inputs": {"input/meter.csv": tmp_path / "meter.csv"},
        "outputs": ["output/events.csv", "output/notes.md"],
        "sandbox": {"backend": BACKEND},
    })
    result = await run_job(job, run_dir=tmp_path / "run")
    assert result.ok, (result.error, result.final_output)
    events = pd.read_csv(tmp_path / "run/output/events.csv", parse_dates=["start", "end"])
    hit = (events["start"] <= pd.Timestamp(end)) & (events["end"] >= pd.Timestamp(start))
    assert hit.sum() == 1 and events.loc[hit, "direction"].item() == "high"
    assert len(events) <= 2  # nothing else in this clean series should look abnormal
    notes = (tmp_path / "run/output/notes.md").read_text()
    assert "time column `Zeitpunkt`" in notes and "analysed column `Leistung_kW`" in notes
    assert "no temperature column" in notes


CANNOT = {
    "no_csv": ({"input/readme.json": '{"a": 1}'}, "Find anomalies in the data; save output/anomalies.csv.",
               "no CSV file"),
    "no_time": ({"input/t.csv": "a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(100))},
                "Find anomalies in input/t.csv; save output/anomalies.csv.",
                "no column that parses as dates"),
    "other_task": ({"input/e.csv": (EXAMPLE / "data/building_energy.csv").read_text()},
                   "Train a neural network to forecast next week's load from input/e.csv and save "
                   "output/forecast.csv.", "does not ask for anomalies"),
    "summary": ({"input/sales.csv": "month,revenue\n2024-01,10\n2024-02,12\n"},
                "Summarise monthly revenue in input/sales.csv and save output/summary.md",
                "does not ask for anomalies"),
}


@pytest.mark.parametrize("case", sorted(CANNOT))
async def test_cannot_serve_is_reported_and_nothing_is_faked(case: str, tmp_path: Path) -> None:
    """A request outside the analyst's scope gets one plain final answer saying what it does and
    how to use a model instead; the run fails without a second pass (no nudge: the same request
    would get the same answer). Before, such runs were nudged twice."""
    files, prompt, reason = CANNOT[case]
    inputs = {}
    for rel, text in files.items():
        host = tmp_path / Path(rel).name
        host.write_text(text)
        inputs[rel] = host
    required = parse_request(prompt).outputs
    job = build_job({"name": case, "model": "offline", "prompt": prompt, "inputs": inputs,
                     "outputs": list(required), "sandbox": {"backend": BACKEND}})
    result = await run_job(job, run_dir=tmp_path / "run")
    assert result.status == "failed" and result.error
    assert reason in result.final_output and "did not create" in result.final_output
    assert "--model openai-compatible:MODEL@" in result.final_output and "time series" in result.final_output
    record = read_record(tmp_path / "run").events
    assert not any(r.type == "nudge" for r in record)
    answers = [r for r in record if r.type == "model_call" and r.output[0].kind == "message"]
    assert len(answers) == 1 and answers[0].output[0].text == result.final_output
    if case in ("other_task", "summary"):  # known from the prompt alone: answered at once
        assert [r.type for r in record].count("model_call") == 1 and not any(r.type == "tool_start" for r in record)
    assert not (tmp_path / "run/output").exists() or not any((tmp_path / "run/output").iterdir())


async def test_streamed_run_matches_the_plain_one(tmp_path: Path) -> None:
    prompt = load_job(EXAMPLE).prompt
    finals = []
    for streamed in (False, True):
        async with open_session(SandboxSpec(backend=BACKEND)) as session:
            await stage_inputs(session, {"input/building_energy.csv": EXAMPLE / "data/building_energy.csv"})
            agent = SandboxAgent(name="t", instructions="Analyse.", model=OfflineAnalyst(),
                                 capabilities=[Shell()])
            config = RunConfig(sandbox=SandboxRunConfig(session=session), tracing_disabled=True)
            if streamed:
                run = Runner.run_streamed(agent, prompt, max_turns=25, run_config=config)
                deltas = [e async for e in run.stream_events()
                          if e.type == "raw_response_event" and e.data.type == "response.output_text.delta"]
                assert deltas, "the final message is streamed as text"
                finals.append(run.final_output)
            else:
                finals.append((await Runner.run(agent, prompt, max_turns=25, run_config=config)).final_output)
            data = await session.read(Path("output/anomalies.csv"))
            assert len(pd.read_csv(io.BytesIO(data.read()))) > 0
    assert finals[0] == finals[1] and "abnormal event(s)" in finals[0]


def test_usage_is_estimated_for_progress_displays(showcase: tuple[Path, Path]) -> None:
    calls = [r for r in read_record(showcase[0]).events if r.type == "model_call"]
    assert all(c.usage.input_tokens > 0 and c.usage.output_tokens > 0 for c in calls)
    analyse = next(c for c in calls if getattr(c.output[0], "call_id", "").startswith("cr-analyse"))
    assert analyse.usage.output_tokens >= len(json.dumps(analyse.output[0].arguments)) // 5


def test_the_readme_summary_example_exits_1_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from coderoom.cli import app

    monkeypatch.chdir(tmp_path)
    Path("sales.csv").write_text("month,revenue\n2024-01,10\n2024-02,12\n")
    args = ["run", "--input", "sales.csv=input/sales.csv", "--output", "output/summary.md", "--model", "offline",
            "--sandbox", BACKEND, "--out", "run", "Summarise monthly revenue in input/sales.csv and save output/summary.md"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "could not serve this request" in result.output and "--model" in result.output
    assert [e.type for e in read_record(tmp_path / "run").events].count("model_call") == 1
