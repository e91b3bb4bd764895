"""Shared by the benchmark scripts: the machine line, and replacing one dated section of
docs/benchmarks.md or another page of docs/ (each script owns its section and leaves the others
alone)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def machine() -> str:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, Linux {platform.release()}"


def write_section(heading: str, text: str, docs: Path = DOCS) -> None:
    """Replace the section of `docs` that starts with `heading` (a '## ...' line prefix), or
    append it."""
    current = docs.read_text() if docs.exists() else ""
    start = current.find(heading)
    if start == -1:
        updated = current.rstrip("\n") + "\n\n" + text
    else:
        end = current.find("\n## ", start + len(heading))
        updated = current[:start] + text.rstrip("\n") + "\n" + (current[end:] if end != -1 else "")
    docs.write_text(updated.lstrip("\n"))
