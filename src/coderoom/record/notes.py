"""What a user should know about how a run went that its outputs do not show: the model never
called a tool, replies were cut at max_tokens, the history was trimmed to fit the context, the
model server does not stream. Read
from the record's events, so `coderoom run` (at its end) and `coderoom show` say the same."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from .events import ContextTrimmed, Egress, Event, ModelCall, ModelReplyCut, ModelStream, ModelStreamOff, ToolStart


def run_notes(events: Iterable[Event]) -> list[str]:
    calls = tools = 0
    cuts: list[ModelReplyCut] = []
    trims: list[ContextTrimmed] = []
    stream_off: ModelStreamOff | None = None
    for event in events:
        if isinstance(event, ModelCall):
            calls += 1
        elif isinstance(event, ToolStart):
            tools += 1
        elif isinstance(event, ModelReplyCut):
            cuts.append(event)
        elif isinstance(event, ContextTrimmed):
            trims.append(event)
        elif isinstance(event, ModelStreamOff):
            stream_off = event
    notes = []
    if calls and not tools:
        notes.append(f"the model never called a tool ({_count(calls, 'reply', 'replies')}, all text): nothing was run in the sandbox")
    if cuts:
        final = sum(1 for c in cuts if not c.retried)
        notes.append(
            f"{_count(len(cuts), 'reply was', 'replies were')} cut at max_tokens={cuts[-1].max_tokens}"
            + (f"; {final} still cut after being asked to finish (marked in the reply)" if final else "")
        )
    if trims:
        last = trims[-1]
        notes.append(
            f"the history was trimmed to fit the model's context ({last.context_size:,} tokens, {last.source}) "
            f"for {len(trims)} of {calls} requests; up to {max(t.chars_removed for t in trims):,} characters "
            f"of tool output left out ({last.method})"
        )
    if stream_off is not None:
        why = f"HTTP {stream_off.status}: {stream_off.reason}" if stream_off.status else stream_off.reason
        notes.append(f"the model server does not stream ({why}): replies were asked for without streaming")
    return notes


def trim_line(event: ContextTrimmed) -> str:
    """One context_trimmed event as a line (the live progress and `show`)."""
    return (
        f"context: the request took ~{event.tokens_before:,} of {event.context_size:,} tokens; "
        f"{event.outputs_trimmed} tool outputs trimmed, {event.items_dropped} items left out "
        f"({event.chars_removed:,} chars) to ~{event.tokens_after:,}"
    )


EgressOutcome = Literal["allowed", "refused", "cut"]


def egress_row(event: Egress) -> dict[str, Any]:
    """One egress event as `show`'s line, the page's table row and an MCP result's entry read it:
    what the sandbox asked for (host, port, method), what the proxy did (`outcome`: allowed,
    refused, or allowed and then cut at a limit) and why, the address it reached, bytes each way
    how long it took, and whether TLS was opened to add a secret. Host and reason are the sandbox's text: each surface escapes them."""
    outcome: EgressOutcome = "refused" if not event.allowed else "cut" if event.reason else "allowed"
    return {
        "host": event.host, "port": event.port, "method": event.method, "outcome": outcome, "reason": event.reason,
        "address": event.address if event.allowed else "", "bytes_up": event.bytes_up,
        "bytes_down": event.bytes_down, "duration_s": round(event.duration_s, 3),
        "intercepted": event.intercepted,
    }


def egress_line(event: Egress) -> str:
    """One egress event as a line (`show`, an MCP result's text)."""
    row = egress_row(event)
    what = f"egress {row['method']} {row['host']}:{row['port']}"
    what += " (https, intercepted)" if row["intercepted"] else ""
    if row["outcome"] == "refused":
        return f"{what} refused: {row['reason']}"
    moved = f"{row['bytes_up']:,} bytes up, {row['bytes_down']:,} down in {row['duration_s']:.3f}s"
    cut = f"; cut: {row['reason']}" if row["outcome"] == "cut" else ""
    return f"{what} via {row['address']}: {moved}{cut}"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def stream_text(event: ModelStream) -> str:
    """A streaming reply's progress: tokens so far and, once there are two, their rate (the
    CLI's status line and an MCP client's progress say it alike)."""
    rate = f" at {event.rate:.1f} tokens/s" if event.rate is not None else ""
    return f"{event.tokens:,} tokens{rate}"
