"""Text from a sandbox or a record, made safe for a terminal.

Sandbox output can carry escape sequences that set the window title, write the clipboard
(OSC 52), clear the screen or forge hyperlinks, C1 controls that some terminals treat as ESC,
and invisible characters that make a line read differently from what it is: bidirectional
overrides and isolates (Trojan Source: a command that shows one thing and is another) and
zero-width characters. Everything shown on a terminal goes through here: C0 (except newline
and tab), DEL, C1, the Unicode line and paragraph separators, bidi controls and zero-width
characters become visible escapes. Rich markup is never interpreted in data: callers print
the result with `markup=False` or as `rich.text.Text`.
"""

from __future__ import annotations

import re

_CONTROL_TEXT = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 but newline and tab, DEL, C1
    "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff"  # bidi, zero-width, separators
    "\udc80-\udcff]"  # bytes that were not UTF-8 (surrogateescape)
)


def terminal_safe(text: str) -> str:
    """`text` with every control or invisible character except newline and tab shown as an escape."""
    return _CONTROL_TEXT.sub(_escape_char, text)


def terminal_safe_bytes(data: bytes) -> bytes:
    """The same for raw output bytes: decoded as UTF-8, and a byte that is not part of valid
    UTF-8 (a raw 0x9b is an 8-bit CSI to some terminals) shown as \\xNN."""
    return terminal_safe(data.decode("utf-8", "surrogateescape")).encode("utf-8")


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
