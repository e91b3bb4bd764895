"""Event-level scoring of reported anomalies against a ground truth.

Why event level: an analyst reads events, not hours. A reported event is correct when it overlaps a
true one widened by a tolerance (default +-3 h, as LEAD's scorer), and a true event is found when
some reported event overlaps it. Recall = found true / true; precision = correct reported / reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

Interval = tuple[pd.Timestamp, pd.Timestamp]


@dataclass(frozen=True)
class EventScore:
    true_events: int
    reported_events: int
    found: int
    correct: int

    @property
    def recall(self) -> float:
        return self.found / self.true_events if self.true_events else 1.0

    @property
    def precision(self) -> float:
        return self.correct / self.reported_events if self.reported_events else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def _overlaps(a: Interval, b: Interval, tol: pd.Timedelta) -> bool:
    return a[0] <= b[1] + tol and a[1] >= b[0] - tol


def score_events(
    true: Sequence[Interval], reported: Sequence[Interval], tol_hours: float = 3
) -> EventScore:
    """Match inclusive [start, end] intervals; any overlap within the tolerance counts."""
    tol = pd.Timedelta(hours=tol_hours)
    found = sum(any(_overlaps(t, r, tol) for r in reported) for t in true)
    correct = sum(any(_overlaps(r, t, tol) for t in true) for r in reported)
    return EventScore(len(true), len(reported), found, correct)


def read_intervals(path: Path | str) -> list[Interval]:
    """`start`,`end` columns of a CSV (any other columns ignored)."""
    frame = pd.read_csv(path)
    if frame.empty:
        return []
    cols = {c.lower(): c for c in frame.columns}
    starts = pd.to_datetime(frame[cols["start"]])
    ends = pd.to_datetime(frame[cols["end"]])
    return list(zip(starts, ends))


def score_files(truth_csv: Path | str, reported_csv: Path | str, tol_hours: float = 3) -> EventScore:
    return score_events(read_intervals(truth_csv), read_intervals(reported_csv), tol_hours)
