"""The page while a reply streams, and the sandbox's connections, in real Chromium against a real
`coderoom serve`: a server that streams shows the reply's text growing (as text: it is model
output) and its token count, rate and time moving, then the final reply in their place; a server
that does not stream shows "waiting for the model" with its clock until the reply, then the same
answer. A run's egress events read as a compact table (method, host, port, allowed or refused and
why, bytes each way, time), every value as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openai_server import OpenAIServer, Trickle, say
from web.page_fixtures import context, outside, page, server  # noqa: F401  (fixtures; `model` is this module's, streaming or not)
from web.served import Served
from web.test_browser import assert_accessible

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ANSWER_TIMEOUT_MS = 120_000
ANSWER = ("The readings rise through the morning, peak at noon and fall again by the evening, "
          "with one <b>odd</b> reading at <script>alert(1)</script> three in the afternoon.")


@pytest.fixture(scope="module", params=[True, False], ids=["streams", "does-not-stream"])
def model(request: pytest.FixtureRequest) -> Iterator[OpenAIServer]:
    with OpenAIServer(streams=request.param) as server:
        yield server


STREAM_STATE = """() => {
  const count = document.querySelector('#transcript .stream-count');
  const text = document.querySelector('#transcript .message.streaming');
  return count && text ? [count.textContent, text.textContent] : null;
}"""


def test_a_reply_streams_in_as_text_with_its_count_or_waits_with_a_clock(page: Any, server: Served,
                                                                         model: OpenAIServer) -> None:
    if model.streams:
        model.script([Trickle(say(ANSWER), interval=0.4)])  # a word every 0.4 s
    else:  # the streaming request is answered at once with JSON; asked again, the answer is slow
        model.script([say(ANSWER), Trickle(say(ANSWER), interval=0.005)])
    page.select_option("#sandbox", "local")
    page.fill("#request", "Describe the readings")
    page.click("#start")

    if model.streams:
        seen: list[list[str]] = []
        page.wait_for_function(f"() => ({STREAM_STATE})() && ({STREAM_STATE})()[1].length > 0", timeout=ANSWER_TIMEOUT_MS)
        seen.append(page.evaluate(STREAM_STATE))
        page.wait_for_function(
            f"(before) => {{ const now = ({STREAM_STATE})(); return now && now[1].length > before; }}",
            arg=len(seen[0][1]), timeout=30_000)
        seen.append(page.evaluate(STREAM_STATE))
        assert page.inner_text("#status") == "the model is replying"
        first, later = (int(s[0].split(": ", 1)[1].split(" tokens")[0]) for s in seen)
        assert 0 < first < later, seen  # the count grows as the words arrive
        assert seen[0][0].startswith("receiving the reply: ") and " s" in seen[1][0]
        assert ANSWER.startswith(seen[1][1]) and len(seen[1][1]) < len(ANSWER)  # the text so far, as text
        assert page.locator("#transcript .message.streaming b, #transcript .message.streaming script").count() == 0
        assert_accessible(page, "a reply streaming in")
    else:
        page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('waiting for the model')")
        page.wait_for_function("() => parseInt(document.querySelector('#elapsed').textContent) >= 2", timeout=60_000)
        assert page.locator("#transcript .stream-count").count() == 0  # nothing streamed: the clock alone

    page.wait_for_selector(".event-ask_end", timeout=ANSWER_TIMEOUT_MS)
    assert page.locator("#transcript .stream-count, #transcript .message.streaming").count() == 0  # the reply replaced it
    assert "<script>alert(1)</script>" in page.inner_text("#transcript .message.final")
    assert page.locator("#transcript script, #transcript .message b").count() == 0
    asked = [bool(r.body.get("stream")) for r in model.requests]
    assert asked == ([True] if model.streams else [True, False])  # a server that does not stream: asked once more
    page.click("#close")
    page.wait_for_selector(".event-run_end", timeout=ANSWER_TIMEOUT_MS)


HOSTILE_HOST = "<img src=x onerror=alert(1)>.test"


def forge_egress_run(runs_dir: Path) -> None:
    run = runs_dir / "egress-run"
    run.mkdir()
    job = {"name": "egress", "prompt": "fetch", "inputs": {}, "outputs": []}
    lines = [
        {"type": "run_start", "t": 0, "record_version": 2, "job": job, "model": "offline"},
        {"type": "egress", "t": 0.1, "host": "api.test", "port": 8443, "method": "CONNECT", "allowed": True,
         "address": "127.0.0.1", "bytes_up": 517, "bytes_down": 4096, "duration_s": 0.25},
        {"type": "egress", "t": 0.2, "host": HOSTILE_HOST, "port": 80, "method": "GET", "allowed": False,
         "reason": "<b>not</b> on the allowlist"},
        {"type": "egress", "t": 0.3, "host": "api.test", "port": 8443, "method": "CONNECT", "allowed": True,
         "address": "127.0.0.1", "bytes_up": 10, "bytes_down": 200000, "reason": "egress_bytes budget used up",
         "duration_s": 1.5},
        {"type": "run_end", "t": 1, "status": "ok", "final_output": "Fetched."},
    ]  # fmt: skip
    (run / "run.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_egress_events_read_as_a_table_of_text(page: Any, server: Served, model: OpenAIServer) -> None:
    if not model.streams:
        pytest.skip("a past run: the model server plays no part")
    forge_egress_run(server.runs_dir)
    page.click("#nav-runs")
    page.click("#runs-table button.run:text-is('egress-run')")
    page.wait_for_selector(".event-run_end")
    tables = page.locator("#transcript .event-egress table.egress")
    assert tables.count() == 1  # consecutive attempts: one table
    assert tables.locator("thead th").all_text_contents() == [
        "method", "host", "port", "outcome", "why", "bytes up", "bytes down", "time"]
    rows = [row.locator("td").all_text_contents() for row in tables.locator("tbody tr").all()]
    assert rows == [
        ["CONNECT", "api.test", "8443", "allowed", "via 127.0.0.1", "517", "4096", "0.250 s"],
        ["GET", HOSTILE_HOST, "80", "refused", "<b>not</b> on the allowlist", "0", "0", "0.000 s"],
        ["CONNECT", "api.test", "8443", "cut", "egress_bytes budget used up", "10", "200000", "1.500 s"],
    ]
    assert tables.locator("tbody tr.egress-refused").count() == 1 and tables.locator("tbody tr.egress-cut").count() == 1
    assert page.locator("#transcript img, #transcript b").count() == 0
    assert_accessible(page, "a run's connections")
