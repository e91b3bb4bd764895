"""What one tool result may put in the model's context: `Limits.tool_output_chars` characters.

`exec_command` returns up to `output_bytes` per stream (1 MiB each by default) and a run_python
reply can be as large; one such result fills or overflows a context window, and a local server
with a 4k-token window fails the request outright. The SDK cuts shell output only when the
model passes `max_output_tokens`, and then drops the middle for good; its `ToolOutputTrimmer`
trims older turns only and keeps nothing. So every shell and run_python tool goes through
`bound_tool` (a wrapper of the tool's `on_invoke_tool`): over the bound, the model reads the
head and the tail around a marker that says how much was cut and where the full text is,
`.coderoom/outputs/<call-id>.txt`, written through the session and at most `saved_bytes` long,
so the model can read it in pieces (sed -n, head -c, tail -c).
"""

from __future__ import annotations

import io
import re
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePosixPath
from typing import Any

from agents.sandbox.errors import SandboxError
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.tool import FunctionTool, ToolOutputText
from agents.tool_context import ToolContext
from pydantic import BaseModel, ConfigDict

from ..errors import CoderoomError

OUTPUTS_DIR = PurePosixPath(".coderoom/outputs")
MARKER_ROOM = 400  # characters kept free for the marker; the limits' minimum leaves 600 for text
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class OutputBound(BaseModel):
    """The bound of one tool result: what the model reads and what the workspace file keeps."""

    model_config = ConfigDict(extra="forbid")
    chars: int = 16_000
    saved_bytes: int = 2 * 1024**2  # both streams of a command, each within output_bytes


def saved_path(call_id: str) -> PurePosixPath:
    """The workspace file for a call's full output; the model chose the id, so it is cleaned."""
    name = _UNSAFE.sub("_", call_id)[:80] or "call"
    return OUTPUTS_DIR / f"{name}.txt"


def cut(text: str, chars: int, where: str) -> str:
    """`text` within `chars`: its head and tail around a marker naming the cut and `where`."""
    room = chars - MARKER_ROOM
    head = room * 2 // 3
    tail = room - head
    marker = f"\n[coderoom: {len(text) - room:,} of {len(text):,} characters cut here; {where}]\n"
    return text[:head] + marker[:MARKER_ROOM] + text[len(text) - tail :]


async def _save(session: BaseSandboxSession, path: PurePosixPath, text: str, max_bytes: int) -> str:
    """Write the full text; the marker's second half: where it is, or why it is not."""
    data = text.encode("utf-8", errors="replace")
    kept = data[:max_bytes]
    try:
        await session.write(Path(path), io.BytesIO(kept))
    except (OSError, ValueError, SandboxError, CoderoomError) as exc:
        return f"the full output could not be saved ({type(exc).__name__}: {str(exc)[:120]})"
    place = f"{session.state.manifest.root.rstrip('/')}/{path}"  # the session's workspace root
    if len(kept) < len(data):
        return f"its first {len(kept):,} bytes are in {place}; read it in pieces (sed -n, head -c, tail -c)"
    return f"the full output is in {place}; read it in pieces (sed -n, head -c, tail -c)"


async def bounded_result(result: Any, session: BaseSandboxSession, call_id: str, bound: OutputBound) -> Any:
    """`result` (a string, or a list whose text parts are bounded; images pass) within `bound`."""
    if isinstance(result, str):
        if len(result) <= bound.chars:
            return result
        return cut(result, bound.chars, await _save(session, saved_path(call_id), result, bound.saved_bytes))
    if isinstance(result, list):
        parts = []
        for index, part in enumerate(result):
            if isinstance(part, ToolOutputText) and len(part.text) > bound.chars:
                name = call_id if index == 0 else f"{call_id}-{index}"
                part = ToolOutputText(text=await bounded_result(part.text, session, name, bound))
            parts.append(part)
        return parts
    return result


def bound_tool(tool: FunctionTool, session: BaseSandboxSession, bound: OutputBound) -> FunctionTool:
    """`tool`, its results bounded (see the module docstring); the tool object is kept, so its
    own methods (run_python's `take_cell`) still work."""
    invoke: Callable[[ToolContext[Any], str], Awaitable[Any]] = tool.on_invoke_tool

    async def bounded_invoke(context: ToolContext[Any], raw_input: str) -> Any:
        result = await invoke(context, raw_input)
        call_id = getattr(context, "tool_call_id", None) or tool.name
        return await bounded_result(result, session, call_id, bound)

    tool.on_invoke_tool = bounded_invoke
    return tool
