"""The analyst's decisions from a transcript alone (no sandbox): step order, polling a command that
is still running, failures reported as such, unique call ids, and the event scorer it is judged by."""

from __future__ import annotations

import ast
import json
from types import SimpleNamespace

import pandas as pd
from agents.testing import assistant_message, function_call

from support.evaluation import score_events
from coderoom.models.nudge import nudge_message
from coderoom.models.offline.policy import Final, ToolCall, decide
from coderoom.models.offline.transcript import read_transcript

PROMPT = "Find anomalies in input/x.csv and save output/anomalies.csv."
NUDGE = nudge_message([SimpleNamespace(path="output/anomalies.csv", detail="missing")])
TOOLS = ["exec_command", "write_stdin"]


def output(call_id: str, text: str, code: int | None = 0, session: int | None = None) -> dict:
    head = ["Chunk ID: abc123", "Wall time: 0.1 seconds"]
    head.append(f"Process exited with code {code}" if code is not None
                else f"Process running with session ID {session}")
    return {"type": "function_call_output", "call_id": call_id,
            "output": "\n".join(head + ["Output:", text])}


def call(name: str, call_id: str, **args: object) -> object:
    return function_call(name, args, call_id=call_id)  # a pydantic item, as the SDK may pass


def test_first_step_lists_the_workspace() -> None:
    action = decide(read_transcript(PROMPT), TOOLS)
    assert isinstance(action, ToolCall) and action.step == "list"
    assert "find ." in action.arguments["cmd"]


def test_running_command_is_polled_then_the_plan_continues() -> None:
    items = [
        {"role": "user", "content": PROMPT},
        call("exec_command", "cr-list-1", cmd="ls"),
        output("cr-list-1", "./input/x.csv\n"),
        call("exec_command", "cr-install-2", cmd="mkdir -p .coderoom ..."),
        output("cr-install-2", "profile.py\n"),
        call("exec_command", "cr-profile-3", cmd="python3 .coderoom/profile.py input/x.csv"),
        output("cr-profile-3", "file: input/x.csv\n", code=None, session=1001),
    ]
    poll = decide(read_transcript(items), TOOLS)
    assert isinstance(poll, ToolCall)
    assert (poll.name, poll.step, poll.arguments["session_id"]) == ("write_stdin", "profile", 1001)
    profile = {"path": "input/x.csv", "rows": 10, "columns": ["t", "v"], "time_col": None}
    items += [call("write_stdin", "cr-profile-4", session_id=1001, chars=""),
              output("cr-profile-4", "CODEROOM_PROFILE " + json.dumps(profile) + "\n")]
    final = decide(read_transcript(items), TOOLS)
    assert isinstance(final, Final)
    assert "no column that parses as dates" in final.text
    assert "did not create these requested files: output/anomalies.csv" in final.text


def test_a_failed_listing_is_not_reported_as_an_empty_workspace() -> None:
    items = [{"role": "user", "content": PROMPT}, call("exec_command", "cr-list-1", cmd="ls"),
             output("cr-list-1", "sh: find: not found\n", code=127)]
    final = decide(read_transcript(items), TOOLS)
    assert isinstance(final, Final) and "exit code 127" in final.text and "find: not found" in final.text


def test_after_a_nudge_it_redoes_the_work_once_then_stops() -> None:
    first = [{"role": "user", "content": PROMPT}, call("exec_command", "cr-list-1", cmd="ls"),
             output("cr-list-1", "./notes.json\n"), assistant_message("I could not ...", item_id="m1")]
    nudged = first + [{"role": "user", "content": NUDGE}]
    again = decide(read_transcript(nudged), TOOLS)
    assert isinstance(again, ToolCall) and again.step == "list"
    assert read_transcript(nudged).total_calls == 1  # the next id is cr-list-2: unique in the run
    twice = nudged + [call("exec_command", "cr-list-2", cmd="ls"), output("cr-list-2", "./notes.json\n"),
                      assistant_message("I could not ...", item_id="m2"),
                      {"role": "user", "content": NUDGE}]
    stop = decide(read_transcript(twice), TOOLS)
    assert isinstance(stop, Final) and "re-ran the analysis once" in stop.text


def test_a_follow_up_that_does_not_ask_for_anomalies_is_refused() -> None:
    first = [{"role": "user", "content": PROMPT}, call("exec_command", "cr-list-1", cmd="ls"),
             output("cr-list-1", "./input/x.csv\n"),
             assistant_message("I analysed input/x.csv and found 6 abnormal event(s).\n1. ...", item_id="m1")]
    follow_up = first + [{"role": "user", "content": "And which day had the most?"}]
    refused = decide(read_transcript(follow_up), TOOLS)
    assert isinstance(refused, Final) and refused.declined
    assert refused.text.startswith("I could not answer this follow-up.")
    assert "My last report was, in short: I analysed input/x.csv and found 6 abnormal event(s)." in refused.text
    assert "not a language model" in refused.text
    # asked again, it still recalls the report, not its own refusal
    again = follow_up + [assistant_message(refused.text, item_id="m2"), {"role": "user", "content": "Why?"}]
    second = decide(read_transcript(again), TOOLS)
    assert isinstance(second, Final) and second.declined and "in short: I analysed input/x.csv" in second.text


def test_a_follow_up_asking_for_anomalies_is_a_new_request() -> None:
    first = [{"role": "user", "content": PROMPT}, call("exec_command", "cr-list-1", cmd="ls"),
             output("cr-list-1", "./input/x.csv\n"), assistant_message("I analysed ...", item_id="m1")]
    follow_up = first + [{"role": "user", "content": "Now find the outliers in input/y.csv"}]
    transcript = read_transcript(follow_up)
    assert (transcript.prompt, transcript.requests, transcript.nudges) == ("Now find the outliers in input/y.csv", 2, 0)
    step = decide(transcript, TOOLS)
    assert isinstance(step, ToolCall) and step.step == "list"


def test_with_a_kernel_the_scripts_run_as_python_cells() -> None:
    items = [{"role": "user", "content": PROMPT}, call("exec_command", "cr-list-1", cmd="ls"),
             output("cr-list-1", "./input/x.csv\n")]
    tools = [*TOOLS, "run_python"]
    install = decide(read_transcript(items), tools)
    assert isinstance(install, ToolCall) and (install.name, install.step) == ("exec_command", "install")
    for name in ("profile.py", "analyse.py", "verify.py"):
        assert f"cat > .coderoom/{name} <<'CODEROOM_PY'" in install.arguments["cmd"]
    items += [call("exec_command", "cr-install-2", cmd="..."), output("cr-install-2", "profile.py\n")]
    profile = decide(read_transcript(items), tools)
    assert isinstance(profile, ToolCall) and (profile.name, profile.step) == ("run_python", "profile")
    code = profile.arguments["code"]
    argv = next(ast.literal_eval(node.value) for node in ast.parse(code).body
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "sys.argv")
    assert argv == [".coderoom/profile.py", "input/x.csv"]
    assert "runpy.run_path(sys.argv[0], run_name='__main__')" in code


def test_a_failed_kernel_step_is_reported_with_its_traceback() -> None:
    items = [{"role": "user", "content": PROMPT}, call("exec_command", "cr-list-1", cmd="ls"),
             output("cr-list-1", "./input/x.csv\n"), call("exec_command", "cr-install-2", cmd="..."),
             output("cr-install-2", "profile.py\n"), call("run_python", "cr-profile-3", code="..."),
             {"type": "function_call_output", "call_id": "cr-profile-3",
              "output": "[cell 1: error in 0.2 s]\n[error]\nSystemExit: usage: profile.py CSV"}]
    final = decide(read_transcript(items), [*TOOLS, "run_python"])
    assert isinstance(final, Final) and "Profiling input/x.csv failed" in final.text
    assert "SystemExit: usage: profile.py CSV" in final.text


def test_without_a_shell_it_says_so() -> None:
    final = decide(read_transcript(PROMPT), ["view_image"])
    assert isinstance(final, Final) and "exec_command" in final.text


def ts(text: str) -> pd.Timestamp:
    return pd.Timestamp(text)


def test_event_scorer_tolerance_and_counts() -> None:
    true = [(ts("2024-01-01 10:00"), ts("2024-01-01 12:00")), (ts("2024-01-05 00:00"), ts("2024-01-05 03:00"))]
    reported = [
        (ts("2024-01-01 15:00"), ts("2024-01-01 16:00")),  # 3 h after the first: within tolerance
        (ts("2024-01-04 20:00"), ts("2024-01-04 20:00")),  # 4 h before the second: outside
        (ts("2024-02-01 00:00"), ts("2024-02-01 05:00")),  # nothing near
    ]
    score = score_events(true, reported, tol_hours=3)
    assert (score.found, score.correct) == (1, 1)
    assert score.recall == 0.5 and round(score.precision, 3) == 0.333
    assert score_events(true, reported, tol_hours=4).found == 2
