"""The page while a model works, in real Chromium against a real `coderoom serve` whose model is
the loopback scripted server (tests/openai_server.py): "waiting for the model" with a clock that
moves every second, each reply's time and tokens on its turn, Stop ending the answer as
"stopped" with the session still usable (the kernel keeps its variables), the request shown in
past runs; the token taken from a #token= pasted into an open tab or into the token field; a
wide Markdown table scrolling inside its box; a DataFrame value shown as a table. axe-core finds
nothing serious on these views.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from openai_server import OpenAIServer, Trickle, call, say
from web.page_fixtures import context, model, outside, page, server  # noqa: F401  (fixtures)
from web.served import Served
from web.test_browser import assert_accessible, assert_fits

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ANSWER_TIMEOUT_MS = 120_000


def elapsed_seconds(page: Any) -> int:
    text = page.inner_text("#elapsed")
    return int(text.split(" s", 1)[0])


def test_progress_stop_and_a_follow_up_in_the_same_kernel(page: Any, server: Served, model: OpenAIServer) -> None:
    model.script([
        Trickle(call("run_python", code="x = 41"), interval=1.5),  # a slow reply: seconds of waiting
        call("run_python", code="import time\ntime.sleep(120)"),
        call("run_python", code="print('x is', x + 1)"),
        say("x plus one is **42**."),
    ])  # fmt: skip
    page.select_option("#sandbox", "local")
    page.fill("#request", "Sleep a while")
    page.click("#start")

    # waiting for the model: the status says so and the clock beside it moves every second
    page.wait_for_function("() => document.querySelector('#status').textContent.startsWith('waiting for the model')")
    # (its chunks come 1.5 s apart: "the model is replying" from the first, on the same clock)
    page.wait_for_function("() => /^[1-9]\\d* s/.test(document.querySelector('#elapsed').textContent)")
    first = elapsed_seconds(page)
    page.wait_for_function(f"() => parseInt(document.querySelector('#elapsed').textContent) > {first}", timeout=3_000)
    assert page.locator("#stop").is_visible()

    # the sleeping cell runs; Stop ends the answer as "stopped"
    page.wait_for_selector("#transcript .cell:has-text('time.sleep(120)')", timeout=ANSWER_TIMEOUT_MS)
    page.wait_for_function("() => document.querySelector('#status').textContent === 'running run_python'")
    turn_one = page.inner_text("#transcript .turn >> nth=0")
    assert "tokens in" in turn_one and " out" in turn_one, turn_one  # the reply's time and tokens
    assert_accessible(page, "running, with Stop")
    page.wait_for_timeout(1_000)  # the cell is in its sleep
    page.click("#stop")
    page.wait_for_selector(".event-ask_end", timeout=30_000)  # at once, not after the 120 s sleep
    assert page.inner_text(".event-ask_end h4") == "Answer · stopped"
    assert "stopped on request" in page.inner_text(".event-ask_end")
    assert page.locator(".event-ask_end.status-stopped").count() == 1
    assert page.inner_text("#status") == "ready (last answer: stopped)"
    assert page.inner_text("#elapsed") == "" and page.locator("#stop").is_hidden()

    # the session goes on: a follow-up reads the x the stopped answer's kernel kept
    page.fill("#followup", "And now?")
    page.press("#followup", "Enter")
    page.wait_for_function("() => document.querySelectorAll('.event-ask_end').length === 2", timeout=ANSWER_TIMEOUT_MS)
    assert "x is 42" in page.inner_text("#transcript")
    assert page.inner_text(".event-ask_end >> nth=1") .startswith("Answer · ok")
    assert page.locator("#transcript .message.final").count() == 1  # one block per answer
    assert page.inner_text("#status") == "ready (last answer: ok)"
    assert_accessible(page, "stopped, then answered")

    # the record says what happened; past runs show the request, not an internal string
    page.click("#close")
    page.wait_for_selector(".event-run_end", timeout=ANSWER_TIMEOUT_MS)
    # (the live view shows run_end too, before the page opens the past run: wait for that view)
    page.wait_for_function("() => document.querySelector('#status').textContent === 'past run (read-only)'")
    run_name = page.inner_text("#session-title").removeprefix("Run ")
    ends = [json.loads(line) for line in (server.runs_dir / run_name / "run.jsonl").read_text().splitlines()]
    assert [e["status"] for e in ends if e["type"] == "ask_end"] == ["stopped", "ok"]
    page.click("#nav-runs")
    row = page.locator("#runs-table tr", has=page.locator(f"button.run:text-is('{run_name}')"))
    assert row.locator("td").nth(3).inner_text() == "Sleep a while"


def test_a_token_pasted_into_an_open_tab_is_taken(context: Any, server: Served) -> None:
    page = context.new_page()
    try:
        page.goto(f"{server.base}/")
        page.wait_for_selector("#token-form:not([hidden])")
        assert_accessible(page, "asking for the token")
        page.evaluate(f"() => {{ location.hash = '#token={server.token}'; }}")  # a new URL pasted into this tab
        page.wait_for_selector("body[data-ready='1']")
        assert server.token not in page.url
        assert page.locator("#token-form").is_hidden() and page.locator("#new-form").is_visible()
    finally:
        page.close()


def test_a_token_pasted_into_the_field_is_taken_and_a_wrong_one_asked_again(context: Any, server: Served) -> None:
    page = context.new_page()
    try:
        page.goto(f"{server.base}/")
        page.fill("#token-input", "not-this-servers-token")
        page.click("#token-form button")
        page.wait_for_function("() => document.querySelector('#error').textContent.includes('refused the token')")
        assert page.locator("#token-form").is_visible() and page.get_attribute("body", "data-ready") is None
        page.fill("#token-input", f"{server.base}/#token={server.token}")  # the whole printed URL
        page.click("#token-form button")
        page.wait_for_selector("body[data-ready='1']")
        assert page.locator("#token-form").is_hidden()
        assert page.eval_on_selector_all("#model option", "os => os.length") == 2  # /api/config answered
    finally:
        page.close()


def test_a_wide_table_in_an_answer_scrolls_inside_its_box(page: Any, server: Served) -> None:
    columns = [f"column_{i:02d}_with_a_long_name" for i in range(20)]
    table = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n| " + " | ".join("1234567" for _ in columns) + " |"
    run = server.runs_dir / "wide-answer"
    run.mkdir()
    job = {"name": "wide", "prompt": "a wide table", "inputs": {}, "outputs": []}
    lines = [
        {"type": "run_start", "t": 0, "record_version": 2, "job": job, "model": "offline"},
        {"type": "run_end", "t": 1, "status": "ok", "final_output": "The table:\n\n" + table},
    ]
    (run / "run.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    page.click("#nav-runs")
    page.click("#runs-table button.run:text-is('wide-answer')")
    page.wait_for_selector(".event-run_end .table-scroll table th")
    assert page.eval_on_selector(".event-run_end .table-scroll", "box => box.scrollWidth > box.clientWidth")
    assert_fits(page)
    assert_accessible(page, "a wide table")


FRAME = (
    "import pandas as pd\n"
    "df = pd.DataFrame({'site': ['<b>north</b>', 'south'] * 30, 'kwh': range(60)})\n"
)


def test_a_dataframe_value_is_shown_as_a_table(page: Any, server: Served, model: OpenAIServer) -> None:
    model.script([
        call("run_python", code=FRAME + "df.head()"),
        call("run_python", code="pd.concat([df] * 15, axis=1)"),  # 60 rows x 30 columns
        say("Sixty readings."),
    ])  # fmt: skip
    page.select_option("#sandbox", "local")
    page.fill("#request", "Show me the data")
    page.click("#start")
    page.wait_for_selector(".event-ask_end", timeout=ANSWER_TIMEOUT_MS)
    head, wide = page.locator("#transcript .event-tool_result table.value-table").all()
    assert head.locator("thead th").all_text_contents() == ["index", "site", "kwh"]
    assert head.locator("tbody th").all_text_contents() == ["0", "1", "2", "3", "4"]
    assert head.locator("tbody tr").first.locator("td").all_text_contents() == ["<b>north</b>", "0"]  # text, not markup
    assert head.locator("caption").inner_text() == "5 rows x 2 columns (showing all)"
    assert wide.locator("caption").inner_text() == "60 rows x 30 columns (showing the first 50 rows x 20 columns)"
    assert wide.locator("tbody tr").count() == 50 and wide.locator("thead th").count() == 1 + 20
    scroller = wide.locator("xpath=ancestor::div[contains(@class, 'table-scroll')]")
    assert scroller.evaluate("box => box.scrollWidth > box.clientWidth")  # wide: it scrolls in its box
    assert page.locator("#transcript b").count() == 0
    assert page.locator("#transcript pre.value").count() == 0  # the text preview is the model's; the page shows the table
    assert_fits(page)
    assert_accessible(page, "a DataFrame value")
