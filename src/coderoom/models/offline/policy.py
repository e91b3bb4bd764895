"""The offline analyst's state machine: list -> install -> profile -> analyse -> verify -> answer.

`install` is one shell command writing the scripts from `scripts/` into `.coderoom/` of the
workspace, so the workspace archive holds everything needed to reproduce the run. Each later step
runs one script: in the run_python kernel when the agent has one (pandas is imported once and
later steps start warm; the session exports as a notebook of real cells), else as a shell
command. The next step is chosen only from the transcript (prompt + earlier tool results), never
from hidden state. Whatever cannot be done is said plainly in the final message; no output is
ever faked.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .request import Request, parse_request
from .transcript import Call, Transcript, call_exit, call_text, marker, running_session

SCRIPT_DIR = ".coderoom"
RUN_YIELD_MS = 120_000  # one-shot backends: the command's timeout; PTY backends clamp and we poll
MAX_POLLS = 20
DATA_SUFFIXES = (".csv", ".tsv", ".txt")
SUPPORTED_OUTPUTS = (".csv", ".png", ".svg", ".pdf", ".jpg", ".md", ".txt", ".json")


@dataclass(frozen=True)
class ToolCall:
    step: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Final:
    text: str
    declined: bool = False  # the request is outside what the analyst does: the run fails at once


Action = ToolCall | Final


def script(name: str) -> str:
    return resources.files(__package__).joinpath("scripts", name).read_text(encoding="utf-8")


def _heredoc(path: str, text: str, tag: str) -> str:
    return f"cat > {path} <<'{tag}'\n{text.rstrip()}\n{tag}\n"


SCRIPTS = ("profile.py", "analyse.py", "verify.py")


def install_scripts() -> str:
    """One shell command that writes the analyst's scripts into .coderoom/."""
    parts = [f"mkdir -p {SCRIPT_DIR}\n"]
    parts += [_heredoc(f"{SCRIPT_DIR}/{name}", script(name), "CODEROOM_PY") for name in SCRIPTS]
    parts.append(f"ls {SCRIPT_DIR}")
    return "".join(parts)


def run_script(step: str, name: str, argv: list[str], tool_names: list[str],
               config: dict[str, str] | None = None) -> ToolCall:
    """Run an installed script (after writing its `config` files): a run_python cell when there
    is a kernel, else a shell command."""
    path = f"{SCRIPT_DIR}/{name}"
    if "run_python" in tool_names:
        lines = ["import runpy", "import sys", "from pathlib import Path", ""]
        lines += [f"Path({cfg!r}).write_text({text!r})" for cfg, text in (config or {}).items()]
        lines += [f"sys.argv = {[path, *argv]!r}", f"{step}_globals = runpy.run_path(sys.argv[0], run_name='__main__')"]
        return ToolCall(step, "run_python", {"code": "\n".join(lines)})
    parts = [_heredoc(cfg, text, "CODEROOM_JSON") for cfg, text in (config or {}).items()]
    parts.append(" ".join(["python3", path, *map(shlex.quote, argv)]))
    return ToolCall(step, "exec_command", {"cmd": "".join(parts), "yield_time_ms": RUN_YIELD_MS})


def analysis_config(profile: dict[str, Any], outputs: list[str]) -> dict[str, Any]:
    """The analyse.py config for a profiled CSV: how to read it and what to write."""
    target = str(profile["target"])
    return {
        "csv": profile["path"],
        "sep": profile["sep"],
        "decimal": profile["decimal"],
        "time_col": profile["time_col"],
        "time_options": profile.get("time_options") or {},
        "target": target,
        "target_is_energy": any(h in target.lower() for h in ("kwh", "wh", "energy", "consumption")),
        "temperature": profile.get("temperature"),
        "temperature_unit": profile.get("temperature_unit"),
        "outputs": outputs,
    }


LIST_CMD = (
    "pwd && find . -path ./" + SCRIPT_DIR + " -prune -o -type f -print | sort | head -n 500"
)


def decide(transcript: Transcript, tool_names: list[str], instructions: str = "") -> Action:
    """The next action for this transcript."""
    request = parse_request(transcript.prompt, instructions)
    if transcript.nudges > 1:
        return Final(_give_up(transcript))
    if "exec_command" not in tool_names:
        return Final("I cannot act: no `exec_command` tool is available, so I ran nothing and "
                     "wrote no files.", declined=True)
    if not request.wants_anomalies and transcript.requests > 1:
        return _refuse_follow_up(transcript)
    if not request.wants_anomalies:
        return _decline(request, "The request does not ask for anomalies or abnormal events, and "
                                 "that is the only analysis the offline analyst performs.")
    last = transcript.calls[-1] if transcript.calls else None
    if last is not None and not last.done:
        return _poll(last, tool_names)
    listing = transcript.step("list")
    if listing is None:
        return ToolCall("list", "exec_command", {"cmd": LIST_CMD})
    if call_exit(listing) != 0:
        return _decline(request, f"Listing the workspace failed (exit code "
                                      f"{call_exit(listing)}):\n\n{_tail(listing)}", scope=False)
    data = _pick_data_file(request, call_text(listing))
    if data is None:
        return _decline(request, "I found no CSV file in the workspace to analyse.")
    install = transcript.step("install")
    if install is None:
        return ToolCall("install", "exec_command", {"cmd": install_scripts()})
    if call_exit(install) != 0:
        return _decline(request, f"Writing my scripts into {SCRIPT_DIR}/ failed (exit code "
                                      f"{call_exit(install)}):\n\n{_tail(install)}", scope=False)
    prof_call = transcript.step("profile")
    if prof_call is None:
        return run_script("profile", "profile.py", [data], tool_names)
    profile = marker(call_text(prof_call), "CODEROOM_PROFILE")
    if profile is None:
        return _decline(request, f"Profiling {data} failed:\n\n{_tail(prof_call)}")
    problem = _unservable(profile, request)
    if problem:
        return _decline(request, problem, profile)
    outputs = [o for o in request.outputs if o.lower().endswith(SUPPORTED_OUTPUTS)]
    analyse = transcript.step("analyse")
    if analyse is None:
        cfg_path = f"{SCRIPT_DIR}/analyse.json"
        config = json.dumps(analysis_config(profile, outputs), indent=2, sort_keys=True)
        return run_script("analyse", "analyse.py", [cfg_path], tool_names, {cfg_path: config})
    result = marker(call_text(analyse), "CODEROOM_RESULT")
    if result is None:
        return _decline(request, f"The analysis script failed:\n\n{_tail(analyse)}", profile, scope=False)
    verify = transcript.step("verify")
    if verify is None and request.outputs:
        return run_script("verify", "verify.py", list(request.outputs), tool_names)
    checks = marker(call_text(verify), "CODEROOM_VERIFY") if verify else {}
    return Final(_summary(request, profile, result, checks or {}))


def _poll(call: Call, tool_names: list[str]) -> Action:
    session = running_session(call.outputs[-1])
    if "write_stdin" not in tool_names or len(call.outputs) > MAX_POLLS:
        return Final(f"The `{call.step}` step was still running after {len(call.outputs)} checks "
                     f"(session {session}); I stopped there and wrote no further files.")
    return ToolCall(call.step, "write_stdin",
                    {"session_id": session, "chars": "", "yield_time_ms": 30_000})


def _pick_data_file(request: Request, listing: str) -> str | None:
    """The data file the prompt names if it exists; else the first CSV (input/ first)."""
    files = [line[2:] for line in listing.splitlines() if line.startswith("./")]
    files = [f for f in files if not f.startswith(("output/", SCRIPT_DIR + "/"))]
    for wanted in request.inputs:
        norm = posixpath.normpath(wanted)
        if norm in files:
            return norm
    data = [f for f in files if f.lower().endswith(DATA_SUFFIXES[:2])]
    data.sort(key=lambda f: (not f.startswith("input/"), f))
    return data[0] if data else None


def _unservable(profile: dict[str, Any], request: Request) -> str | None:
    if profile.get("time_col") is None:
        return (f"{profile['path']} has no column that parses as dates or times, so there is no "
                "time series to analyse.")
    if profile.get("target") is None:
        return f"{profile['path']} has no numeric column to analyse besides time and temperature."
    if (profile.get("step_seconds") or 0) <= 0 or profile.get("rows", 0) < 48:
        return f"{profile['path']} has too few timestamped rows for a baseline (need 48 or more)."
    return None


def _profile_lines(profile: dict[str, Any]) -> list[str]:
    lines = [f"- {profile['path']}: {profile['rows']} rows, columns {', '.join(profile['columns'])}."]
    if profile.get("time_col"):
        lines.append(f"- Time column `{profile['time_col']}` from {profile.get('start')} to "
                     f"{profile.get('end')}; {profile.get('gap_count', 0)} gap(s).")
    missing = {k: v for k, v in profile.get("missing", {}).items() if v}
    if missing:
        lines.append("- Missing values: " + ", ".join(f"{k} {v}" for k, v in sorted(missing.items())))
    return lines


SCOPE = (
    "I am coderoom's offline analyst, not a language model: I find abnormal events in a time "
    "series (a CSV with a date/time column and a numeric column, 48 or more rows) and write them "
    "as a table, a plot and a report. For any other request, run with a model: "
    "`--model gpt-5.4` (OpenAI, with OPENAI_API_KEY set) or "
    "`--model openai-compatible:MODEL@http://localhost:11434/v1` (a local OpenAI-compatible "
    "server: Ollama, llama.cpp, vLLM, LM Studio; `coderoom models check SPEC` tests one)."
)


FOLLOW_UP = (
    "I could not answer this follow-up. I do not read or reason about earlier results: the only "
    "thing I do is run the anomaly analysis again, and this request does not ask for anomalies or "
    "abnormal events. My earlier answer stands as written."
)


def _refuse_follow_up(transcript: Transcript) -> Final:
    """A follow-up it cannot serve: refused, with the first line of its last report (not of an
    earlier refusal) to recall what it found."""
    reports = [t.strip() for t in transcript.assistant_texts if t.strip() and not t.startswith(FOLLOW_UP)]
    previous = reports[-1].split("\n", 1)[0] if reports else ""
    recalled = ["", f"My last report was, in short: {previous}"] if previous else []
    return Final("\n".join([FOLLOW_UP, *recalled, "", SCOPE]), declined=True)


def _decline(request: Request, reason: str, profile: dict[str, Any] | None = None, *,
             scope: bool = True) -> Final:
    """The final answer for a request the analyst cannot serve (`scope`: outside what it does,
    said with SCOPE) or whose step failed; asking again changes nothing, so the run ends failed
    without a second pass."""
    lines = ["I could not complete this request.", "", reason.strip()]
    if profile:
        lines += ["", "What I found:", *_profile_lines(profile)]
    if request.outputs:
        lines += ["", "I did not create these requested files: " + ", ".join(request.outputs) + "."]
    if scope:
        lines += ["", SCOPE]
    return Final("\n".join(lines), declined=True)


def _summary(request: Request, profile: dict[str, Any], result: dict[str, Any],
             checks: dict[str, Any]) -> str:
    n = result["events"]
    lines = [f"I analysed {profile['path']} ({profile['rows']} rows, {profile.get('start')} to "
             f"{profile.get('end')}) and found {n} abnormal event(s) in {profile['target']}: "
             f"{result['high']} higher and {result['low']} lower than expected."]
    for i, e in enumerate(result["list"]):
        lines.append(f"{i + 1}. {e['start']} to {e['end']} ({e['hours']:g} h): {e['kind']}, "
                     f"{e['direction']}, score {e['score']:.1f}")
    if n > len(result["list"]):
        lines.append(f"... and {n - len(result['list'])} more (see the table).")
    tm = result.get("baseline", {}).get("temperature_model")
    lines.append("")
    lines.append("Method: expected value from the same hour of the week in surrounding weeks"
                 + (", adjusted for outdoor temperature" if tm else "")
                 + "; robust z-scores of the residuals; consecutive abnormal hours grouped into "
                 "events, small fluctuations ignored.")
    good = [p for p, c in checks.items() if c.get("ok")]
    bad = {p: c.get("detail") for p, c in checks.items() if not c.get("ok")}
    if good:
        lines += ["", "Files written and checked: " + ", ".join(good) + "."]
    if bad:
        lines += ["", "Problems: " + "; ".join(f"{p}: {d}" for p, d in bad.items()) + "."]
    if result.get("skipped"):
        lines += ["", "I cannot produce these file types: " + ", ".join(result["skipped"]) + "."]
    return "\n".join(lines)


def _tail(call: Call, lines: int = 15) -> str:
    return "\n".join(call_text(call).strip().splitlines()[-lines:])


def _give_up(transcript: Transcript) -> str:
    previous = transcript.assistant_texts[-1] if transcript.assistant_texts else ""
    return ("I already re-ran the analysis once after being told outputs were missing or invalid; "
            "running it again would give the same result, so I am stopping here.\n\n"
            "My last report was:\n\n" + previous)
