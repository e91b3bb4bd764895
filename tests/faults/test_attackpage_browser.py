"""Attack on the page (attackpage, 2026-12-06): a hostile model server streams markup and
terminal escapes into a live session's reply, and a hostile record holds thousands of connection
attempts with hostile hosts and reasons. Real `coderoom serve`, real Chromium (tests/web)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from openai_server import OpenAIServer, Stream, chunk
from web.page_fixtures import context, model, outside, page, runs_dir, server  # noqa: F401  (fixtures)
from web.served import Served

pytestmark = [pytest.mark.browser, pytest.mark.slow]

BIDI, LINE_SEP, ESC, CSI = "\u202e", "\u2028", "\x1b", "\x9b"
HOSTILE_TEXT = f"<img src=x onerror=alert(1)>{ESC}]0;title{ESC}[31m red{CSI}1m {BIDI}fdp.exe{LINE_SEP}next "
HOSTILE_HOST = f"<img src=x onerror=alert(1)>{BIDI}{ESC}[2J" + "h" * 250
ROWS = 4_990  # the page shows a past run's first 5,000 events


def test_streamed_markup_and_escapes_arrive_as_visible_escapes_never_as_markup(page: Any, server: Served,
                                                                              model: OpenAIServer) -> None:
    deltas = [chunk({"content": HOSTILE_TEXT})] * 20  # 6 s of streaming: the page is read while it streams
    model.script([Stream((chunk({"role": "assistant", "content": ""}), *deltas, chunk({}, "stop")), interval=0.3)])
    page.select_option("#sandbox", "local")
    page.fill("#request", "Say something")
    page.click("#start")
    page.wait_for_function("() => (document.querySelector('#transcript .message.streaming') || {}).textContent"
                           "?.includes('fdp.exe')", timeout=120_000)
    shown = page.inner_text("#transcript .message.streaming")
    assert "<img src=x onerror=alert(1)>" in shown  # as text
    assert "\\u202efdp.exe" in shown and "\\x1b]0;title" in shown and "\\x9b1m" in shown and "\\u2028" in shown
    assert not any(c in shown for c in (BIDI, LINE_SEP, ESC, CSI))
    assert page.locator("#transcript img").count() == 0
    assert page.title() != "title"
    page.wait_for_selector(".event-ask_end", timeout=120_000)
    page.click("#close")
    page.wait_for_selector(".event-run_end", timeout=120_000)


def forge_connections(runs_dir: Path) -> None:
    run = runs_dir / "many-connections"
    run.mkdir()
    job = {"name": "egress", "prompt": "fetch", "inputs": {}, "outputs": []}
    lines = [{"type": "run_start", "t": 0, "record_version": 2, "job": job, "model": "offline"}]
    lines += [{"type": "egress", "t": 0.001 * n, "host": HOSTILE_HOST, "port": 80, "method": f"GET{ESC}[1m",
               "allowed": False, "reason": f"<b>refused</b>{BIDI}" + "r" * 980} for n in range(ROWS)]
    lines.append({"type": "run_end", "t": 9, "status": "ok", "final_output": "Fetched."})
    (run / "run.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_thousands_of_hostile_connection_attempts_read_as_one_table_of_text(page: Any, server: Served) -> None:
    forge_connections(server.runs_dir)
    page.click("#nav-runs")
    started = time.monotonic()
    page.click("#runs-table button.run:text-is('many-connections')")
    page.wait_for_selector(".event-run_end", timeout=120_000)
    print(f"{ROWS} connection rows shown in {time.monotonic() - started:.1f} s")
    table = page.locator("#transcript .event-egress table.egress")
    assert table.count() == 1 and table.locator("tbody tr").count() == ROWS
    first = table.locator("tbody tr").first.locator("td").all_text_contents()
    assert first[0] == "GET\\x1b[1m" and first[1].startswith("<img src=x onerror=alert(1)>\\u202e\\x1b[2J")
    assert first[4].startswith("<b>refused</b>\\u202e")
    assert page.locator("#transcript img, #transcript b").count() == 0
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1280  # the table scrolls in its box
