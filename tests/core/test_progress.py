"""The status line of `coderoom run` moves while the model is asked: its clock is read on every
refresh of the spinner, not only when a record event arrives; it says it is waiting for the model
and for how long, and after each reply how many tokens it had and at what rate."""

from __future__ import annotations

import io

from rich.console import Console

from coderoom.cli.progress import Progress
from coderoom.record.events import ModelCall, ModelStart, ModelStream, Usage


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def shown(progress: Progress) -> str:
    """What the spinner draws right now (the status line as a terminal would get it)."""
    screen = io.StringIO()
    Console(file=screen, width=200, color_system=None).print(progress.status.renderable)
    return screen.getvalue()


def test_the_clock_moves_while_the_model_has_not_answered() -> None:
    clock = Clock()
    progress = Progress(Console(file=io.StringIO()), clock=clock)
    progress(ModelStart(turn=1))
    clock.now += 3
    first = shown(progress)
    clock.now += 4  # no event in between
    second = shown(progress)

    assert "turn 1 · waiting for the model 3s · 3.0s · 0 tokens" in first
    assert "turn 1 · waiting for the model 7s · 7.0s · 0 tokens" in second


def test_a_reply_shows_its_tokens_and_their_rate() -> None:
    clock = Clock()
    progress = Progress(Console(file=io.StringIO()), clock=clock)
    progress(ModelStart(turn=1))
    clock.now += 10
    progress(ModelCall(turn=1, duration_s=10.0, usage=Usage(requests=1, input_tokens=900, output_tokens=100, total_tokens=1000)))
    clock.now += 2

    line = shown(progress)
    assert "turn 1 · model answered · 12.0s · 1,000 tokens · last reply 100 tokens at 10.0 tokens/s" in line
    assert "waiting" not in line


def test_a_streaming_reply_shows_its_tokens_so_far_and_their_rate_while_the_clock_moves() -> None:
    clock = Clock()
    progress = Progress(Console(file=io.StringIO()), clock=clock)
    progress(ModelStart(turn=2))
    clock.now += 5
    progress(ModelStream(tokens=1, elapsed_s=5.0))
    assert "turn 2 · receiving the reply: 1 tokens 5s · 5.0s" in shown(progress)
    clock.now += 3
    progress(ModelStream(tokens=40, rate=13.3, elapsed_s=8.0, text="more"))
    clock.now += 1  # no event in between: the clock still moves
    assert "turn 2 · receiving the reply: 40 tokens at 13.3 tokens/s 9s · 9.0s" in shown(progress)
