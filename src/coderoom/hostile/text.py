"""Text from a sandbox or a record, made safe for a terminal.

Sandbox output can carry escape sequences that set the window title, write the clipboard
(OSC 52), clear the screen or forge hyperlinks, and C1 controls that some terminals treat as
ESC. Everything shown on a terminal goes through here: C0 (except newline and tab), DEL, C1,
and the Unicode line and paragraph separators become visible escapes. Rich markup is never
interpreted in data: callers print the result with `markup=False` or as `rich.text.Text`.
"""

from __future__ import annotations

import re

_CONTROL_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def terminal_safe(text: str) -> str:
    """`text` with every control character except newline and tab shown as an escape."""
    return _CONTROL_TEXT.sub(_escape_char, text)


def terminal_safe_bytes(data: bytes) -> bytes:
    """The same for raw output bytes (UTF-8 encoded C1 controls included)."""
    return _CONTROL_BYTES.sub(lambda m: b"".join(b"\\x%02x" % b for b in m.group()), data)


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
