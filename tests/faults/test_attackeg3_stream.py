"""Stream fallback pass (2026-12-07): a streaming request refused with 400, 415 or 422 is asked once
more without `stream` (`models.guard._answer`, `streaming.STREAM_REFUSALS`), attacked as a hostile
model server would: words made for the terminal and the page, a refusal of everything, a redirect
to another server. Loopback fake servers only. See docs/security.md, "Egress early answers and
stream fallback attack pass" (E-R rows)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from coderoom.cli import transcript
from coderoom.jobs import build_job
from coderoom.record import read_record
from coderoom.record.events import ModelStreamOff
from coderoom.record.reader import RecordError
from coderoom.run import run_job
from openai_server import Fail, OpenAIServer, say, spec_for

CANARY_KEY = "canary-modelkey-3e9d70b1f4"
HOSTILE = "\x1b]52;c;Y2FuYXJ5\x07\x1b[2J\u202e[bold red]<img src=x onerror=alert(1)>[/]\r\n" + "w" * 1_000_000


def _job(server: OpenAIServer) -> object:
    return build_job({"name": "fallback", "prompt": "Say hi.", "model": spec_for("chat_completions", server), "max_turns": 2})


def _environ(retries: int = 0) -> dict[str, str]:
    return {"CODEROOM_MODEL_MAX_RETRIES": str(retries), "OPENAI_COMPATIBLE_API_KEY": CANARY_KEY}


async def test_a_refusal_s_words_are_kept_bounded_on_one_line_and_shown_escaped(tmp_path: Path) -> None:
    """E-R10: the refusal that turns streaming off carries escapes (OSC 52, a screen clear), a bidi
    override, rich and HTML markup and 1 MB: the record keeps MAX_STREAM_OFF_REASON_CHARS (200) of it on one line,
    and `coderoom show` prints it with every control as an escape, markup as text."""
    with OpenAIServer([Fail(400, HOSTILE), say("done.")]) as server:
        result = await run_job(_job(server), run_dir=tmp_path / "run", environ=_environ(), listeners=[lambda _e: None])
    assert [bool(r.body.get("stream")) for r in server.requests] == [True, False]
    assert result.status == "ok" and result.final_output == "done."
    record = read_record(result.run_dir)
    (off,) = [e for e in record.events if isinstance(e, ModelStreamOff)]
    assert off.status == 400 and len(off.reason) <= 200 and "\n" not in off.reason and "\r" not in off.reason
    shown = io.StringIO()
    saved, transcript.out = transcript.out, Console(file=shown, width=200, force_terminal=True, highlight=False)
    try:
        transcript.print_record(record)
    finally:
        transcript.out = saved
    note = [line for line in shown.getvalue().splitlines() if "does not stream" in line]
    assert note and "\x07" not in note[0] and "]52;" not in note[0].replace("\\x1b]52;", "")
    assert "\u202e" not in note[0] and "[bold red]" in note[0]


async def test_a_forged_record_with_a_huge_stream_off_reason_is_not_a_coderoom_record(tmp_path: Path) -> None:
    """E-R11: run folders are hostile: a `model_stream_off` whose reason is 4 million characters (the writer keeps
    200 characters) would make `coderoom show` print a note of 4 million escapes (1 million characters took 1.35 s, growing faster than its length); the reader refuses it, as it
    does an egress event's over-long fields."""
    with OpenAIServer([Fail(400, "no stream"), say("done.")]) as server:
        result = await run_job(_job(server), run_dir=tmp_path / "run", environ=_environ(), listeners=[lambda _e: None])
    record_file = result.run_dir / "run.jsonl"
    forged = {"type": "model_stream_off", "status": 400, "reason": "\x1b[2J" * 1_000_000}
    with record_file.open("a") as out:
        out.write(json.dumps(forged) + "\n")
    with pytest.raises(RecordError, match="model_stream_off"):
        read_record(result.run_dir)


async def test_a_server_that_refuses_everything_costs_two_requests_an_attempt_never_a_loop(tmp_path: Path) -> None:
    """E-R12: 400 to the streaming request and to the one without, each saying `x-should-retry:
    true`, with two retries allowed: two requests in all (the fallback's one more, and the retry
    policy does not retry a 400); streaming stays on (the refusal was not about it) and no
    `model_stream_off`."""
    refusal = Fail(400, "bad request", headers={"x-should-retry": "true"})
    with OpenAIServer([refusal] * 20) as server:
        result = await run_job(_job(server), run_dir=tmp_path / "run", environ=_environ(retries=2), listeners=[lambda _e: None])
    streamed = [bool(r.body.get("stream")) for r in server.requests]
    assert result.status == "error"
    assert streamed == [True, False], streamed  # a 400 is not retried, whatever the server asks
    assert not [e for e in read_record(result.run_dir).events if isinstance(e, ModelStreamOff)]


async def test_a_redirect_to_another_server_takes_no_api_key_with_the_fallback(tmp_path: Path) -> None:
    """E-R13: the model server answers each request with a 307 to another server (another port:
    another origin), which refuses the streaming one. Both requests, the streamed one and the
    fallback, reach that server without the key; the first server alone saw it."""
    with OpenAIServer([Fail(400, "stream is not supported"), say("done.")]) as other:
        to_other = Fail(307, "moved", headers={"Location": f"{other.url}/chat/completions"})
        with OpenAIServer([to_other, to_other]) as first:
            result = await run_job(_job(first), run_dir=tmp_path / "run", environ=_environ(), listeners=[lambda _e: None])
    assert [bool(r.body.get("stream")) for r in first.requests] == [True, False]
    assert all(r.headers.get("authorization") == f"Bearer {CANARY_KEY}" for r in first.requests)
    assert [bool(r.body.get("stream")) for r in other.requests] == [True, False], other.requests
    assert all(CANARY_KEY not in json.dumps(r.headers) for r in other.requests)
    assert result.status == "ok"
