"""Record events made into JSON for the page, bounded: a forged record's 16 MiB strings and
100,000-item lists stay on the server. The page puts every string into the DOM as text, and
every string is first `hostile.text.terminal_safe`'s display form: a bidi override or
zero-width character in a name (`invoice<U+202E>fdp.exe` reading as "invoiceexe.pdf") or in a
model's text is shown as its escape, not obeyed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..hostile.text import terminal_safe

MAX_TEXT_CHARS = 20_000
"""Of any one string sent to the page (the record keeps the rest; `coderoom show` cuts the same)."""
MAX_LIST_ITEMS = 500
MAX_DEPTH = 12


def event_json(event: BaseModel) -> dict[str, Any]:
    """`event` as the page gets it: its fields, every string and list cut to the bounds."""
    return bounded(event.model_dump(mode="json"))


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
