"""The end of `coderoom run`, and `coderoom show`, say when the model never called a tool, when its
replies were cut at max_tokens and when the history was trimmed to fit the context: a run against
the loopback server whose model only talks, and is cut twice."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from coderoom.cli import app
from openai_server import OpenAIServer, Reply, call, say, spec_for

ENV = {"CODEROOM_MODEL_MAX_RETRIES": "0", "COLUMNS": "300", "OPENAI_API_KEY": ""}


def _run(server: OpenAIServer, out: Path, *extra: str) -> str:
    args = ["run", "--model", spec_for("chat_completions", server), "--out", str(out), *extra, "Say something."]
    result = CliRunner().invoke(app, args, env=ENV)
    return f"exit {result.exit_code}\n{result.output}"


def _show(run_dir: Path) -> str:
    return CliRunner().invoke(app, ["show", str(run_dir)], env=ENV).output


def test_a_model_that_only_talks_and_is_cut(tmp_path: Path) -> None:
    with OpenAIServer([Reply(text="I think", cut=True), Reply(text="that", cut=True)], api_key="no-key") as server:
        output = _run(server, tmp_path / "run", "--max-tokens", "16")

    notes = [
        "note: the model never called a tool (1 reply, all text): nothing was run in the sandbox",
        "note: 2 replies were cut at max_tokens=16; 1 still cut after being asked to finish",
    ]
    for note in notes:
        assert note in output, output
        assert note in _show(tmp_path / "run")
    assert "trimmed to fit" not in output


def test_a_trimmed_run_says_so_at_the_end_and_in_show(tmp_path: Path) -> None:
    # a context a little larger than the instructions and tool schemas (about 1,800 tokens), so
    # the outputs of later turns do not all fit
    script = [call("exec_command", cmd=f"seq -f 'row %g of a long output' 1 {40 + n}") for n in range(4)]
    with OpenAIServer([*script, say("Done.")], api_key="no-key", n_ctx=2560) as server:
        output = _run(server, tmp_path / "run", "--max-tokens", "128")

    assert output.startswith("exit 0") and server.refused == [], output
    assert "context: the request took ~" in output  # live, in the progress
    note = "note: the history was trimmed to fit the model's context (2,560 tokens, "
    assert note in output and "never called a tool" not in output
    shown = _show(tmp_path / "run")
    assert note in shown and "context: the request took ~" in shown
