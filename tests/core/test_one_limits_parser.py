"""Every command that starts a sandbox reads its limits through one parser
(`sandboxes.limits.parse_limits`, reached from flags only through `sandboxes.flags.SandboxFlags`,
which reads `--package` too): the same bad `--limit` (or short form) or `--package` gets the same
words and exit 2 from each, before any run folder exists, and no other module turns flags, job
files or service options into `Limits` or an environment on its own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from coderoom.errors import UsageError
from coderoom.sandboxes.limits import LIMIT_NAMES, Limits, limits_from_flags, parse_limits

SOURCE = Path(__file__).parents[2] / "src" / "coderoom"
FAST = [sys.executable, "-c", "from coderoom.cli import main; main()"]  # the entry point
TYPER = [sys.executable, "-c", "from coderoom.cli import app; app()"]  # never the fast path

TOO_SMALL = "--limit memory: memory = 1 bytes is under the 16M minimum; a plain number is bytes: write e.g. '1M' for megabytes"
UNKNOWN = f"--limit bogus: not a limit; choose one of: {', '.join(sorted(LIMIT_NAMES))}"
NOT_A_PAIR = "--limit 'memory': expected NAME=VALUE, e.g. --limit memory=8G"


def _commands(tmp_path: Path) -> dict[str, list[str]]:
    """Each command that starts a sandbox, with what it needs besides its limits; the run folders
    (or output folder) it would make are all under tmp_path/runs."""
    recorded = tmp_path / "recorded"
    recorded.mkdir(exist_ok=True)
    (recorded / "run.jsonl").write_text("")
    runs = str(tmp_path / "runs")
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    (job / "coderoom.toml").write_text("prompt = 'p'\n")
    return {
        "run": [*FAST, "run", "--model", "offline", "--out", f"{runs}/run", "hello"],
        "sandbox run (fast path)": [*FAST, "sandbox", "run"],
        "sandbox run (typer)": [*TYPER, "sandbox", "run"],
        "rerun": [*FAST, "rerun", str(recorded), "--out", f"{runs}/rerun"],
        "serve": [*FAST, "serve", "--port", "0", "--runs-dir", runs],
        "mcp": [*FAST, "mcp", "--runs", runs],
        "batch": [*FAST, "batch", str(job), "--out", f"{runs}/batch"],
    }


SHORT_FORM_OF_MEMORY = {"run", "sandbox run (fast path)", "sandbox run (typer)", "serve", "mcp", "batch"}


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--limit", "memory=1"], TOO_SMALL),
        (["--memory", "1"], TOO_SMALL),  # a short form is the same limit, read the same way
        (["--limit", "bogus=1"], UNKNOWN),
        (["--limit", "memory"], NOT_A_PAIR),
    ],
    ids=["too-small", "short-form", "unknown-name", "not-a-pair"],
)
def test_every_command_refuses_a_bad_limit_in_the_same_words_before_any_run_folder(
    flags: list[str], said: str, tmp_path: Path
) -> None:
    answers = {}
    for name, argv in _commands(tmp_path).items():
        if flags[0] == "--memory" and name not in SHORT_FORM_OF_MEMORY:
            continue
        command = [*argv, *flags, "--", "true"] if name.startswith("sandbox run") else [*argv, *flags]
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        answers[name] = (done.returncode, done.stderr.strip().splitlines()[-1:])
    assert answers == dict.fromkeys(answers, (2, [f"coderoom: error: {said}"]))
    assert not (tmp_path / "runs").exists()


def test_every_command_refuses_a_bad_package_in_the_same_words_before_any_run_folder(tmp_path: Path) -> None:
    answers = {}
    for name, argv in _commands(tmp_path).items():
        if name == "rerun":  # takes no --package: it installs only what the user grants
            continue
        command = [*argv, "--package", "numpy; import os"] + (["--", "true"] if name.startswith("sandbox run") else [])
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        answers[name] = (done.returncode, done.stderr.strip().splitlines()[-1:])
    said = answers["run"][1]
    assert said == ["coderoom: error: --package: not a plain pip requirement: 'numpy; import os' (use a name with "
                    "optional extras and version specifiers, e.g. 'statsmodels==0.14.*')"], said
    assert answers == dict.fromkeys(answers, (2, said))
    assert not (tmp_path / "runs").exists()


def test_a_job_file_names_itself_and_the_limit_in_the_same_words(tmp_path: Path) -> None:
    from coderoom.errors import JobError
    from coderoom.jobs import load_job

    (tmp_path / "coderoom.toml").write_text("prompt = 'p'\n[sandbox.limits]\nmemory = 1\nbogus = 1\n")
    with pytest.raises(JobError) as refused:
        load_job(tmp_path)
    lines = str(refused.value).splitlines()
    assert lines[0] == f"{tmp_path / 'coderoom.toml'}: invalid job"
    assert lines[1:] == [f"  {said.replace('--limit', 'coderoom.toml [sandbox.limits]')}" for said in (TOO_SMALL, UNKNOWN)]


def test_sandbox_run_sets_any_limit_with_limit_flags() -> None:
    """`sandbox run` had flags for memory, timeout and pids only; now every limit, by name."""
    from coderoom.cli.sandbox_run import parse_plain, plain_spec

    parsed = parse_plain(["--limit", "workspace_size=8M", "--limit", "cpus=0.5", "--limit", "file_size=1M", "--", "true"])
    assert parsed is not None
    limits = plain_spec(parsed[0]).limits
    assert (limits.workspace_size, limits.cpus, limits.file_size) == (8 * 1024**2, 0.5, 1024**2)


def test_a_short_form_wins_over_limit_for_the_same_name_and_the_base_keeps_the_rest() -> None:
    base = Limits(pids=64)
    limits = limits_from_flags(["memory=4G", "timeout=5"], base=base, memory="1G", timeout=None)
    assert (limits.memory, limits.timeout, limits.pids) == (1024**3, 5.0, 64)


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"timeout": float("inf")}, "timeout: inf is not a number above 0"),
        ({"timeout": "nan"}, "timeout: 'nan' is not a number above 0"),
        ({"pids": True}, "pids: True is not a whole number of at least 1"),
        ({"network": "maybe"}, "network: 'maybe' is not true or false"),
        ({"memory": "9" * 5000}, "memory: '99999"),  # shown bounded
        ({"tool_output_chars": 999}, "tool_output_chars: 999 is not a whole number of at least 1000"),
    ],
)
def test_values_no_limit_can_hold_are_refused_with_the_value_shown_bounded(values: dict[str, object], said: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_limits(values, source="X")
    assert refused.value.message.startswith(f"X {said}")
    assert len(refused.value.message) < 200


def test_a_limits_object_never_holds_a_value_the_parser_would_refuse() -> None:
    assert Limits(memory="512M", network="yes") == parse_limits({"memory": "512M", "network": True}, source="X")
    assert Limits(network=1) == Limits(network="true") and Limits(network=0) == Limits()  # as TOML may write it
    with pytest.raises(ValueError, match="memory: memory = 1 bytes is under"):
        Limits(memory=1)


# Where each entry into the limits parser may be called, by module (relative to src/coderoom):
# anything else that reads limits from flags, a job file or a service option is a second parser.
ALLOWED_CALLS = {
    "parse_size": {"sandboxes/limits.py", "sandboxes/spec.py"},  # spec: [sandbox.environment] max_size
    "flag_values": {"sandboxes/limits.py"},
    "parse_limits": {"sandboxes/limits.py", "sandboxes/spec.py", "export/rerun.py"},  # rerun: the record's, as data
    "limits_from_flags": {"sandboxes/flags.py"},  # `SandboxFlags`, which every command's flags go through
    "with_allowlist": {"sandboxes/flags.py"},
    "with_packages": {"sandboxes/flags.py"},
    "Limits(...)": {"export/rerun.py"},  # the replay's defaults; `Limits()` (all defaults) is anyone's
}


def _calls() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {name: set() for name in ALLOWED_CALLS}
    for path in SOURCE.rglob("*.py"):
        module = str(path.relative_to(SOURCE))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name == "Limits" and (node.args or node.keywords):
                name = "Limits(...)"
            elif name in ("model_validate", "model_construct") and "Limits" in ast.unparse(node.func):
                name = "Limits(...)"
            if name in found:
                found[name].add(module)
    return found


def test_nothing_else_builds_limits_from_flags_or_tables() -> None:
    assert _calls() == ALLOWED_CALLS


def test_the_call_finder_sees_a_second_parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a module that builds `Limits` from a flag itself is found."""
    rogue = tmp_path / "cli" / "rogue.py"
    rogue.parent.mkdir()
    rogue.write_text("def f(memory):\n    return Limits(memory=parse_size(memory))\n")
    monkeypatch.setattr(sys.modules[__name__], "SOURCE", tmp_path)
    assert _calls()["Limits(...)"] == {"cli/rogue.py"} and _calls()["parse_size"] == {"cli/rogue.py"}
