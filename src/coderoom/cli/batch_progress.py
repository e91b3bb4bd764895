"""The live display of `coderoom batch` (one status line: done, running, failed, ETA; one line per
job that ends) and its summary table.

Job names and errors are shown through `display` (terminal-safe, no markup): an error can quote
what a model or a sandbox said.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .display import first_line, safe

if TYPE_CHECKING:  # the runner (and the Agents SDK under it) loads when the batch runs
    from ..batch.manifest import BatchEntry
    from ..batch.runner import JobOutcome

STATUS_STYLE = {"ok": "green", "failed": "red", "error": "red", "interrupted": "yellow"}


class BatchProgress:
    """Follows a batch (`runner.BatchWatcher`): a status line, and a line per job that ends."""

    def __init__(self, console: Console, *, total: int, earlier: Sequence[JobOutcome]) -> None:
        self.console = console
        self.total = total
        self.outcomes = list(earlier)  # jobs an earlier attempt finished count as done
        self.done = self.earlier = len(earlier)
        self.failed = 0
        self.running: set[str] = set()
        self.started = time.monotonic()
        self.status = console.status(self._text())

    def _eta(self) -> str:
        finished_now = self.done - self.earlier
        left = self.total - self.done
        if left == 0:
            return "0s"
        if finished_now == 0:
            return "-"
        return _duration((time.monotonic() - self.started) / finished_now * left)

    def _text(self) -> Text:
        return Text(
            f"batch: {self.done}/{self.total} done · {len(self.running)} running · {self.failed} failed"
            f" · ETA {self._eta()} · {time.monotonic() - self.started:.0f}s"
        )

    def job_started(self, entry: BatchEntry, run_dir: Path) -> None:
        self.running.add(entry.key)
        self.status.update(self._text())

    def job_ended(self, outcome: JobOutcome) -> None:
        self.running.discard(outcome.key)
        self.outcomes.append(outcome)
        self.done += 1
        self.failed += 0 if outcome.ok else 1
        self.console.print(Text.assemble(
            (f"{outcome.status:<11}", STATUS_STYLE.get(outcome.status, "")), " ", safe(outcome.key, "bold"),
            f" {outcome.duration_s:.1f}s · outputs {outcome.outputs_ok}/{outcome.outputs} · {outcome.tokens:,} tokens",
            safe(f" · on {outcome.host}") if outcome.host else "",
            f" · ran again: {len(outcome.lost)} attempt(s) lost with their node" if outcome.lost else "",
        ))  # fmt: skip
        self.status.update(self._text())


def summary_table(entries: Sequence[BatchEntry], outcomes: Sequence[JobOutcome], out: Path) -> Table:
    """Per job: status, time, outputs checked, tokens, run folder; jobs that did not run say so."""
    by_key = {outcome.key: outcome for outcome in outcomes}
    table = Table(title=safe(f"batch in {out}"), title_justify="left")
    for column, justify in (("job", "left"), ("status", "left"), ("time", "right"), ("outputs", "right"),
                            ("tokens", "right"), ("run folder", "left")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for entry in entries:
        outcome = by_key.get(entry.key)
        if outcome is None:
            table.add_row(safe(entry.key), Text("not run", "dim"), "-", "-", "-", "-")
            continue
        status = Text(outcome.status, STATUS_STYLE.get(outcome.status, ""))
        if outcome.earlier:
            status.append(" (earlier run)", "dim")
        table.add_row(
            safe(entry.key), status, f"{outcome.duration_s:.1f}s", f"{outcome.outputs_ok}/{outcome.outputs}",
            f"{outcome.tokens:,}", safe(outcome.run_dir),
        )  # fmt: skip
    return table


def failure_lines(outcomes: Sequence[JobOutcome]) -> list[Text]:
    """One line per job that did not pass: its name, status and the first line of its error."""
    return [
        Text.assemble((f"{outcome.status}: ", "red"), safe(outcome.key, "bold"), ": ",
                      safe(first_line(outcome.error or outcome.signal or "see its record", 300)))  # fmt: skip
        for outcome in outcomes
        if not outcome.ok
    ]


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds + 0.5), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
