"""A run's record rendered for the terminal (what `coderoom show` prints), every piece of it through
`display`: escaped, never markup."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from ..record.events import (
    RECOVERED, AskEnd, AskStart, ContextTrimmed, Egress, Event, FileWritten, MessageItem, ModelCall, ModelReplyCut,
    Nudge, RunEnd, RunStart, ToolResult,
)
from ..record.notes import egress_line, run_notes, trim_line
from ..record.reader import Record
from .display import safe, safe_markdown, shown

out = Console(highlight=False)


def print_record(record: Record) -> None:
    for event in record.events:
        _show_event(event)
    for note in run_notes(record.events):
        out.print(Text.assemble(("note: ", "yellow"), safe(note)))
    if record.skipped:
        out.print(safe(f"({record.skipped} events of types this coderoom does not know were skipped)", "dim"))
    if record.unfinished:
        out.print(safe(f"run did not finish: {record.unfinished}", "bold red"))


def _input_of(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return str(arguments.get("cmd") or arguments.get("code") or arguments)
    return str(arguments)


def _show_event(event: Event) -> None:
    stamp = (f"{event.t:7.2f}s", "dim")
    if isinstance(event, RunStart):
        job = event.job
        sandbox = job.get("sandbox")
        if not isinstance(sandbox, dict):
            sandbox = {}
        title = safe(f"{job.get('name', '?')} · model {event.model} · sandbox {sandbox.get('backend', '?')}")
        out.print(Panel(safe(shown(str(job.get("prompt", "")))), title=title, title_align="left"))
    elif isinstance(event, ModelCall):
        out.print(Text.assemble(stamp, (f" turn {event.turn}", "bold"), (
            f" model call ({event.input_items} items in, {event.usage.total_tokens:,} tokens, {event.duration_s}s)"
        )))  # fmt: skip
        for item in event.output:
            if isinstance(item, MessageItem) and item.text:
                out.print(Panel(safe_markdown(shown(item.text)), title="assistant", title_align="left"))
    elif isinstance(event, AskStart):  # a live session's request
        out.print(Panel(safe(shown(event.request)), title=Text.assemble(stamp, " request"), title_align="left",
                        border_style="magenta"))
    elif isinstance(event, AskEnd):
        colour = "green" if event.status == "ok" else "red"
        line = Text.assemble(stamp, " ", safe(f"request {event.status}", colour))
        if event.error:
            line.append_text(Text.assemble(": ", safe(event.error)))
        out.print(line)
    elif isinstance(event, FileWritten):
        out.print(Text.assemble(stamp, " ", safe(f"client wrote {event.path} ({event.size:,} bytes)", "dim")))
    elif isinstance(event, ToolResult):
        by = " (client)" if event.origin == "client" else ""
        out.print(Text.assemble(stamp, " ", safe(event.name, "cyan"), f"{by} ({event.duration_s}s)"))
        out.print(Panel(safe(shown(_input_of(event.arguments))), title="input", title_align="left", border_style="cyan"))
        title = safe(f"cell {event.cell.number}: {event.cell.status_text}") if event.cell else Text("result")
        if event.cell and event.cell.state_lost:
            title.append(" · state lost", style="red")
        out.print(Panel(safe(shown(event.output) or "(no output)"), title=title, title_align="left", border_style="dim"))
    elif isinstance(event, ContextTrimmed):
        out.print(Text.assemble(stamp, " ", safe(trim_line(event), "yellow")))
    elif isinstance(event, ModelReplyCut):
        then = "; asked to finish" if event.retried else "; marked as cut"
        out.print(Text.assemble(stamp, (f" reply cut at max_tokens={event.max_tokens}{then}", "yellow")))
    elif isinstance(event, Egress):
        out.print(Text.assemble(stamp, " ", safe(egress_line(event), "dim" if event.allowed and not event.reason else "yellow")))
    elif isinstance(event, Nudge):
        reasons = "; ".join(f"{m.path} ({m.reason})" for m in event.missing)
        out.print(Text.assemble(stamp, (" nudge: ", "yellow"), safe(reasons)))
    elif isinstance(event, RunEnd):
        colour = {"ok": "green", RECOVERED: "yellow"}.get(event.status, "red")
        line = Text.assemble(stamp, " ", safe(f"run {event.status}", colour), f" in {event.duration_s}s")
        if event.error:
            line.append_text(Text.assemble(": ", safe(event.error)))
        out.print(line)
        if event.cause:
            out.print(safe(f"  {event.cause}; saved: {', '.join(event.saved) or 'nothing'}"))
        for check in event.outputs:
            out.print(safe(f"  {'ok  ' if check.ok else 'FAIL'} {check.path}: {check.detail}"))
