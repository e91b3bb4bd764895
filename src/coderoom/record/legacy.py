"""Records of version 1 (coderoom before typed events) upgraded to today's events on reading.

Version 1 kept a `run_python` cell only as the prose the model read ("[cell N: status]", sections,
"[kernel] ..." notes, a last "figures: " line). This is the one place that prose is parsed, and
only for version 1 records: every reader gets a `Cell` either way.
"""

from __future__ import annotations

import re
from typing import Any

from .events import FIGURE_PATH, CellStatus

_HEADER = re.compile(r"^\[cell (?P<number>\d{1,9}): (?P<status>[^\]\n]*)\]$")
_SECTION = re.compile(r"^\[(stdout|stderr|Out \d+|error)\]$")
_TOOK = re.compile(r" in (\d{1,9}\.\d{1,6}) s$")
_STATUSES: list[tuple[str, CellStatus]] = [
    ("ok", "ok"),
    ("error", "error"),
    ("interrupted", "interrupted"),
    ("timeout, kernel restarted", "restarted"),
    ("kernel crashed", "crashed"),
    ("not run", "bad_request"),
]
FIGURES_LINE = "figures: "
LOST_NOTE = "a new one was started"  # what version 1's kernel said before a cell in a fresh kernel


def upgrade_v1(raw: dict[str, Any]) -> dict[str, Any]:
    """A version 1 event as today's: run_start gets its version, a run_python result its cell."""
    if raw["type"] == "run_start":
        return {**raw, "record_version": 1}
    if raw["type"] == "tool_result" and raw.get("name") == "run_python" and isinstance(raw.get("output"), str):
        cell = cell_from_prose(raw["output"], raw.get("images"))
        return {**raw, "cell": cell}
    return raw


def cell_from_prose(output: str, images: Any) -> dict[str, Any] | None:
    """The cell a version 1 run_python result described; None when no cell ran."""
    lines = output.split("\n")
    header = _HEADER.match(lines[0])
    if header is None:
        return None
    text = header["status"]
    status = next((code for prefix, code in _STATUSES if text.startswith(prefix)), None)
    if status is None:
        return None
    took = _TOOK.search(text)
    sections: dict[str, list[str]] = {}
    notes: list[str] = []
    current: str | None = None
    for line in lines[1:]:
        if _SECTION.match(line):
            current = line[1:-1]
            sections[current] = []
        elif line.startswith(("[kernel] ", "[figure] ", FIGURES_LINE)):
            current = None
            if line.startswith("[kernel] "):
                notes.append(line.removeprefix("[kernel] "))
        elif current is not None:
            sections[current].append(line)
    value = next(("\n".join(body) for name, body in sections.items() if name.startswith("Out ")), None)
    listed = lines[-1][len(FIGURES_LINE) :].split(", ") if lines[-1].startswith(FIGURES_LINE) else []
    extra = [p for p in images or [] if isinstance(p, str)]
    figures = [p for p in dict.fromkeys(listed + extra) if FIGURE_PATH.match(p)]
    joined = {name: "\n".join(body) + "\n" for name, body in sections.items()}
    return {
        "number": int(header["number"]),
        "status": status,
        "duration_s": float(took[1]) if took else None,
        "stdout": joined.get("stdout", ""),
        "stderr": joined.get("stderr", ""),
        "value": value,
        "error": joined["error"] if "error" in sections else None,
        "notes": notes,
        "figures": figures,
        "state_lost": "STATE LOST" in output,
        "fresh_kernel": LOST_NOTE in output,
    }
