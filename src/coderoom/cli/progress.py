"""The live display of `coderoom run`: record events as a status line and one line per tool call.

The status line is rebuilt on every refresh of the spinner, not only when an event arrives: a
local model can take minutes over one reply, and a clock that stands still while it does looks
like a hang. While a request is out it says "waiting for the model" and for how long; while the
reply streams in (`model_stream`, never recorded) it shows the tokens received so far and their
rate; after each reply, the reply's output tokens and rate from the usage the server reported
(a server that does not stream shows only that).

Everything a model or a sandbox chose goes through `display` (terminal-safe, no markup).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.text import Text

from ..record.events import (
    ContextTrimmed, Event, ModelCall, ModelReplyCut, ModelRetry, ModelStart, ModelStream, Nudge, RunStart, ToolResult,
    ToolStart,
)
from ..record.notes import stream_text, trim_line
from .display import first_line, safe


class Progress:
    """Turns record events into a live status line plus one printed line per tool call."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.clock = clock
        self.started = clock()
        self.turn = 0
        self.tokens = 0
        self.doing = "starting the sandbox"
        self.waiting_since: float | None = None  # a model request is out since then
        self.last_reply = ""  # the last reply's output tokens and rate
        self.status = console.status(_Rebuilt(self))

    def line(self) -> Text:
        """The status line as of now."""
        now = self.clock()
        waiting = () if self.waiting_since is None else (f" {now - self.waiting_since:.0f}s",)
        return Text.assemble(
            f"turn {self.turn} · ", safe(self.doing), *waiting,
            f" · {now - self.started:.1f}s · {self.tokens:,} tokens", self.last_reply,
        )  # fmt: skip

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStart):
            if event.notice:
                self.console.print(safe(event.notice, "yellow"))
            backend = event.job.get("sandbox", {}).get("backend", "?")
            self.console.print(Text.assemble("model ", safe(event.model, "bold"), " · sandbox ", safe(backend, "bold")))
        elif isinstance(event, ModelStart):
            self.turn = event.turn
            self.doing = "waiting for the model"
            self.waiting_since = self.clock()
        elif isinstance(event, ModelStream):
            self.doing = f"receiving the reply: {stream_text(event)}"
        elif isinstance(event, ModelCall):
            self.tokens += event.usage.total_tokens
            self.doing = "model answered"
            self.waiting_since = None
            out, seconds = event.usage.output_tokens, event.duration_s
            rate = f" at {out / seconds:.1f} tokens/s" if seconds > 0 else ""
            self.last_reply = f" · last reply {out:,} tokens{rate}"
        elif isinstance(event, ToolStart):
            self.doing = f"{event.name}: {first_line(event.arguments, 50)}"
            self.console.print(Text.assemble(
                (f"{time.monotonic() - self.started:6.1f}s", "dim"), f" turn {self.turn} ",
                safe(event.name, "cyan"), " ", safe(first_line(event.arguments)),
            ))  # fmt: skip
        elif isinstance(event, ToolResult):
            self.doing = f"{event.name} done"
        elif isinstance(event, ModelRetry):
            self.console.print(Text.assemble(
                ("model server: ", "yellow"), safe(event.reason),
                (f"; retry {event.attempt} of {event.max_retries} in {event.wait_s:g}s", "yellow"),
            ))  # fmt: skip
        elif isinstance(event, ModelReplyCut):
            then = "; asking it to finish" if event.retried else ""
            self.console.print(Text(f"the model's reply was cut at max_tokens={event.max_tokens}{then}", "yellow"))
        elif isinstance(event, ContextTrimmed):
            self.console.print(safe(trim_line(event), "yellow"))
        elif isinstance(event, Nudge):
            missing = ", ".join(m.path for m in event.missing)
            self.console.print(Text.assemble(("outputs missing or invalid, asking the model again: ", "yellow"), safe(missing)))


class _Rebuilt:
    """The status line as a renderable the spinner renders afresh on every refresh."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def __rich__(self) -> Text:
        return self.progress.line()
