"""The live display of `coderoom run`: record events as a status line and one line per tool call.

Everything a model or a sandbox chose goes through `display` (terminal-safe, no markup).
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.text import Text

from ..record.events import (
    ContextTrimmed, Event, ModelCall, ModelReplyCut, ModelRetry, ModelStart, Nudge, RunStart, ToolResult, ToolStart,
)
from ..record.notes import trim_line
from .display import first_line, safe


class Progress:
    """Turns record events into a live status line plus one printed line per tool call."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.turn = 0
        self.tokens = 0
        self.doing = "starting the sandbox"
        self.status = console.status(self._text())

    def _text(self) -> Text:
        elapsed = time.monotonic() - self.started
        return Text.assemble(f"turn {self.turn} · ", safe(self.doing), f" · {elapsed:.1f}s · {self.tokens:,} tokens")

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStart):
            if event.notice:
                self.console.print(safe(event.notice, "yellow"))
            backend = event.job.get("sandbox", {}).get("backend", "?")
            self.console.print(Text.assemble("model ", safe(event.model, "bold"), " · sandbox ", safe(backend, "bold")))
        elif isinstance(event, ModelStart):
            self.turn = event.turn
            self.doing = "model thinking"
        elif isinstance(event, ModelCall):
            self.tokens += event.usage.total_tokens
            self.doing = "model answered"
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
        self.status.update(self._text())
