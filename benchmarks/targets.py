"""Speed targets, one row each: our figure beside its anchor measured in the same run, the ratio,
and whether the target holds.

One place for the rule, so that each benchmark's own table and `speed_bench.py`'s table of all
of issue 25's targets say "met" on the same terms. A target is either absolute (our p50 at most
`limit_s`) or relative (our p50 over the anchor's at most `ratio`). A row with neither is an
anchor shown for comparison only.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    label: str
    ours: list[float]  # seconds, every sample
    anchor_label: str
    anchor: list[float]  # seconds, measured in the same run; empty when it could not run here
    limit_s: float | None = None
    ratio: float | None = None

    @property
    def p50(self) -> float:
        return statistics.median(self.ours)

    @property
    def p99(self) -> float:
        ordered = sorted(self.ours)
        return ordered[round(0.99 * (len(ordered) - 1))]

    @property
    def anchor_p50(self) -> float | None:
        return statistics.median(self.anchor) if self.anchor else None

    @property
    def goal(self) -> str:
        if self.limit_s is not None:
            return f"<= {self.limit_s * 1000:g} ms"
        return f"<= {self.ratio:g}x the anchor" if self.ratio is not None else "-"

    @property
    def met(self) -> bool | None:
        """None when there is no target, or a relative one whose anchor could not run."""
        if self.limit_s is not None:
            return self.p50 <= self.limit_s
        if self.ratio is None or self.anchor_p50 is None:
            return None
        return self.p50 / self.anchor_p50 <= self.ratio


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}" if seconds < 0.1 else f"{seconds * 1000:.0f}"


def table(targets: list[Target]) -> str:
    rows = [
        "| target | runs | p50 ms | p99 ms | anchor (same run) | anchor p50 ms | ratio | target | |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for target in targets:
        base = target.anchor_p50
        verdict = {True: "met", False: "MISSED", None: ""}[target.met]
        rows.append(
            f"| {target.label} | {len(target.ours)} | {_ms(target.p50)} | {_ms(target.p99)} | {target.anchor_label} | "
            f"{_ms(base) if base is not None else '-'} | {f'{target.p50 / base:.2f}x' if base else '-'} | "
            f"{target.goal} | {verdict} |"
        )
    return "\n".join(rows)
