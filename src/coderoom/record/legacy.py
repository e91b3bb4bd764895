"""Older records upgraded to today's events on reading: the one place prose is parsed.

Version 1 (coderoom before typed events) kept a `run_python` cell only as the prose the model read
("[cell N: status]", sections, "[kernel] ..." notes, a last "figures: " line). Records of either
version written before shell results were structured kept an `exec_command` result only as the
SDK's prose ("Chunk ID: ...", "Process exited with code N", "Output:"). Both are parsed here, and
only for such records (an event that has its `cell` or `shell` is never parsed): every reader
gets a `Cell` and a `ShellResult` either way.
"""

from __future__ import annotations

import re
from typing import Any

from .events import FIGURE_PATH, LEGACY_MARKER_ROOM, MAX_COMMAND_CHARS, MAX_SHELL_NAME_CHARS, MAX_SHELL_OUTPUT_CHARS, CellStatus

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
_EXEC_HEADER = re.compile(
    r"^Chunk ID: \S*\nWall time: [^\n]*\n(?:Process exited with code (?P<code>-?\d{1,9})\n)?"
    r"(?:Process running with session ID (?P<session>\d{1,9})\n)?(?:Original token count: \d+\n)?"
    r"Output:\n",
)


def upgrade(raw: dict[str, Any], version: int) -> dict[str, Any]:
    """An event of a record of `version` as today's."""
    if version == 1:
        raw = upgrade_v1(raw)
    if raw["type"] == "tool_result" and raw.get("name") == "exec_command" and raw.get("shell") is None:
        output = raw.get("output", "")
        arguments = raw.get("arguments")
        if isinstance(output, str):
            return {**raw, "shell": shell_from_prose(output, arguments if isinstance(arguments, dict) else {})}
    return raw


def _text(value: Any, limit: int) -> str | None:
    return value if isinstance(value, str) and value and len(value) <= limit else None


def shell_from_prose(output: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The shell result an `exec_command` result's prose and arguments describe. Output that
    does not start with the SDK's header is kept whole, status unknown (replayed, as it was)."""
    match = _EXEC_HEADER.match(output)
    if match is None:
        status, code, session, rest = "unknown", None, None, output
    else:  # the SDK printed no exit code only when the command timed out or was left running
        session = int(match["session"]) if match["session"] else None
        code = int(match["code"]) if match["code"] and session is None else None
        status = "running" if session is not None else "exited" if code is not None else "timed_out"
        rest = output[match.end() :]
    command = arguments.get("cmd")
    return {
        "status": status,
        "command": command if isinstance(command, str) and len(command) <= MAX_COMMAND_CHARS else None,
        "workdir": _text(arguments.get("workdir"), MAX_SHELL_NAME_CHARS),
        "shell": _text(arguments.get("shell"), MAX_SHELL_NAME_CHARS),
        "exit_code": code,
        "session_id": session,
        "output": rest[: MAX_SHELL_OUTPUT_CHARS + LEGACY_MARKER_ROOM],
        "output_chars": len(rest),
    }


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
