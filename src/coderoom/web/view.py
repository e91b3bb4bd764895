"""Record events made into JSON for the page, bounded: a forged record's 16 MiB strings and
100,000-item lists stay on the server. The page puts every string into the DOM as text, and
every string is first `hostile.text.terminal_safe`'s display form: a bidi override or
zero-width character in a name (`invoice<U+202E>fdp.exe` reading as "invoiceexe.pdf") or in a
model's text is shown as its escape, not obeyed.

The model's words (its messages and final answers) also come as `hostile.markup`'s sanitised
HTML, in an `html` (message item) or `final_html` (ask_end, run_end) field beside the text: the
page inserts only that, and never renders Markdown itself. An egress event comes with its `row`
(`record.notes.egress_row`: outcome and why), which the page shows in a table, as text."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..hostile.markup import markdown_html
from ..hostile.text import terminal_safe
from ..record.events import Egress
from ..record.notes import egress_row

MAX_TEXT_CHARS = 20_000
"""Of any one string sent to the page (the record keeps the rest; `coderoom show` cuts the same)."""
MAX_LIST_ITEMS = 500
MAX_DEPTH = 12


def event_json(event: BaseModel) -> dict[str, Any]:
    """`event` as the page gets it: its fields, every string and list cut to the bounds."""
    shown = bounded(event.model_dump(mode="json"))
    with_markdown(shown)
    if isinstance(event, Egress):  # the page's table row: `show`'s and MCP's reading of it
        shown["row"] = bounded(egress_row(event))
    return shown


def with_markdown(shown: dict[str, Any]) -> None:
    """Adds the sanitised HTML of the model's words to `shown` (an event already bounded)."""
    if shown.get("type") == "model_call" and isinstance(shown.get("output"), list):
        for item in shown["output"]:
            if isinstance(item, dict) and item.get("kind") == "message" and isinstance(item.get("text"), str):
                item["html"] = markdown_html(item["text"])
    if shown.get("type") in ("ask_end", "run_end") and isinstance(shown.get("final_output"), str) and shown["final_output"]:
        shown["final_html"] = markdown_html(shown["final_output"])


def bounded(value: Any, depth: int = 0) -> Any:
    """`value` (JSON data) with strings cut at MAX_TEXT_CHARS, lists at MAX_LIST_ITEMS, depth at
    MAX_DEPTH, and every string and key in its display form."""
    if isinstance(value, str):
        if len(value) <= MAX_TEXT_CHARS:
            return terminal_safe(value)
        return terminal_safe(value[:MAX_TEXT_CHARS]) + f"\n[... {len(value) - MAX_TEXT_CHARS:,} more characters not shown ...]"
    if depth >= MAX_DEPTH and isinstance(value, (dict, list)):
        return "[... nested too deep to show ...]"
    if isinstance(value, dict):
        return {terminal_safe(str(k)[:200]): bounded(v, depth + 1) for k, v in list(value.items())[:MAX_LIST_ITEMS]}
    if isinstance(value, list):
        return [bounded(v, depth + 1) for v in value[:MAX_LIST_ITEMS]]
    return value
