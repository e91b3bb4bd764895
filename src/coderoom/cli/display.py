"""Text a sandbox, a model or a record chose, made fit for the terminal.

Such text can hold escape sequences (OSC 52 clipboard writes, OSC 0 titles, OSC 8 hyperlinks,
CSI screen clears), C1 controls and rich markup (`[/]` would even crash a print). It reaches the
terminal only as `rich.text.Text` built from `terminal_safe`: controls shown as escapes, markup
never interpreted, no highlighting.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rich.text import Text

from ..hostile.text import terminal_safe

if TYPE_CHECKING:  # rich.markdown loads when a message is shown
    from rich.markdown import Markdown


def safe(value: object, style: str = "") -> Text:
    """`value` as plain text, every control character visible as an escape."""
    return Text(terminal_safe(str(value)), style=style)


def safe_markdown(text: str) -> Markdown:
    """Model text rendered as Markdown: made terminal-safe first, so no control character reaches
    the renderer, and without hyperlinks, so a link shows its real target instead of an OSC 8
    link whose target the model chose."""
    from rich.markdown import Markdown

    return Markdown(terminal_safe(text), hyperlinks=False)


def first_line(value: Any, limit: int = 90) -> str:
    """The first line of a tool call's command, code or path (or of its JSON), cut to `limit`."""
    if isinstance(value, dict):
        value = value.get("cmd") or value.get("code") or value.get("path") or json.dumps(value)
    lines = str(value or "").strip().split("\n")
    line = lines[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


SHOWN_CHARS = 20_000  # of any one text shown: a forged record's 16 MiB lines would take minutes


def shown(text: str) -> str:
    """`text`, cut at SHOWN_CHARS with a marker (the record keeps what it holds)."""
    if len(text) <= SHOWN_CHARS:
        return text
    return text[:SHOWN_CHARS] + f"\n[... {len(text) - SHOWN_CHARS:,} more characters not shown ...]"
