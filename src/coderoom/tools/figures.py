"""The line a `run_python` result ends with to list its saved figures, and reading it back.

Kept apart from `python_kernel` (which needs the Agents SDK) because the run record and the
exporters read it, and `coderoom export` must start without the SDK.
"""

from __future__ import annotations

import re

FIGURES_LINE = "figures: "
FIGURE_PATH = re.compile(r"^\.coderoom/figures/cell-\d+-\d+\.png$")


def figure_paths(text: str) -> list[str]:
    """Workspace paths of the figures a `run_python` result listed in its final line."""
    last = text.rstrip("\n").rpartition("\n")[2]
    if not last.startswith(FIGURES_LINE):
        return []
    paths = [p.strip() for p in last[len(FIGURES_LINE) :].split(",")]
    return [p for p in paths if FIGURE_PATH.match(p)]
