"""What each MCP tool returns as data: its output schema and `structuredContent`, beside the text.

Why: a calling agent should not parse `session_id:` out of prose. Each tool declares one of these
models as its output schema (`Annotated[CallToolResult, Model]`, which the SDK advertises and
checks on every result that is not an error); `answer` puts the same facts into both the text
the model reads and the structured content a program reads, and sets `isError` when the work
failed (a cell that did not end "ok", a command with a non-zero exit code, a failed run).

Every string here that came from a sandbox is already bounded and escaped by `content` (the
caller passes the same text it shows), so the structured copy is no less safe than the text.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from mcp.types import CallToolResult, ContentBlock


class _Result(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SessionLimits(_Result):
    timeout_s: float = Field(description="wall-clock seconds per command")
    memory_bytes: int
    workspace_bytes: int
    network: bool


class OpenedSession(_Result):
    session_id: str
    files: list[str] = Field(description="workspace paths copied in")
    workspace: str = Field(description="the working directory inside the sandbox")
    output_dir: str = Field(description="where results go; it exists in every new session")
    limits: SessionLimits


class Connection(_Result):
    """One connection attempt the sandbox made through its allowlist's proxy while the call ran
    (`record.notes.egress_row`: the same reading as `coderoom show` and the page)."""

    host: str
    port: int
    method: str = Field(description="CONNECT (HTTPS) or the HTTP method")
    outcome: str = Field(description="allowed, refused, or cut (allowed, then cut at a limit)")
    reason: str = Field(description="why it was refused or cut")
    address: str = Field(description="the address the proxy reached, when allowed")
    bytes_up: int
    bytes_down: int
    duration_s: float
    intercepted: bool = Field(description="TLS was opened by the proxy to add a secret's header")


CONNECTIONS = "connection attempts through the egress allowlist's proxy that ended while this call ran"


class CellRun(_Result):
    session_id: str
    status: str = Field(description="ok, error, interrupted, restarted, crashed, bad_request or unreachable")
    cell: int | None = Field(description="the cell's number in the session's kernel")
    text: str = Field(description="stdout, stderr, the last value and the traceback, as the text content")
    figures: int = Field(description="figures returned as image content")
    connections: list[Connection] = Field(default_factory=list, description=CONNECTIONS)


class CommandRun(_Result):
    session_id: str
    exit_code: int
    timed_out: bool
    stdout: str
    stderr: str
    connections: list[Connection] = Field(default_factory=list, description=CONNECTIONS)


class WrittenFile(_Result):
    session_id: str
    path: str
    size: int


class ReadFile(_Result):
    session_id: str
    path: str
    size: int
    uri: str = Field(description="the same file as a resource")


class ListedFile(_Result):
    path: str
    kind: str = Field(description="file, dir, link or other")
    size: int
    left_out: str | None = Field(description="why the exit policy keeps it in (read_file refuses it)")


class FileList(_Result):
    session_id: str
    files: list[ListedFile]


class ClosedSession(_Result):
    session_id: str
    run_folder: str


class OutputStatus(_Result):
    path: str
    ok: bool
    detail: str
    uri: str | None = Field(description="a resource of the saved output, when it was saved")


class LostRun(_Result):
    run_folder: str = Field(description="the run folder holding the attempt's partial record")
    node: str
    host: str


class JobRun(_Result):
    status: str = Field(description="ok, failed, error or interrupted")
    run_folder: str
    error: str | None
    outputs: list[OutputStatus]
    final_output: str
    node: str | None = Field(default=None, description="with --ray: the Ray node that ran the job")
    host: str | None = Field(default=None, description="with --ray: that node's address")
    lost_attempts: list[LostRun] = Field(default_factory=list, description="with --ray: attempts whose node was lost (the job ran again)")


def answer(result: _Result, *blocks: ContentBlock, is_error: bool = False) -> CallToolResult:
    """A tool result: `blocks` for the model to read, `result` as its structured content."""
    return CallToolResult(content=list(blocks), structured_content=result.model_dump(mode="json"), is_error=is_error)
