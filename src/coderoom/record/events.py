"""What a run record holds: one JSON object per line in `run.jsonl`, each an event with a `type`.

Every event type is a pydantic model, so the writer can only write what a reader understands and a
reader gets typed fields, never prose to re-parse. `run_start` (always the first line) carries
`record_version`; records without it are version 1, read through `legacy`. A reader skips event
types it does not know (a newer coderoom may add some) and counts them.

The models stay free of the Agents SDK so `coderoom show` and `export` load fast.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from .names import RECORD_FILE as RECORD_FILE  # re-exported: the record's file name

RECORD_VERSION = 2
"""2: typed events; run_python results carry a `cell`. 1: the same events, cells only as prose.
Live sessions added event types (session_open, ask_start, ask_end, file_written, file_read,
files_listed) and a tool event's `origin`, shell results their `shell` and cells their `table`; a reader of version 2
skips unknown types and fields (an older coderoom reads a shell step from its prose, which is
still written), so the version stays."""

FIGURE_PATH = re.compile(r"^\.coderoom/figures/cell-\d+-\d+\.png$")
"""The only names the kernel gives figures; a record naming any other file is not coderoom's."""

CellStatus = Literal["ok", "error", "interrupted", "restarted", "crashed", "bad_request"]


def _figure_path(path: str) -> str:
    if not FIGURE_PATH.match(path):
        raise ValueError(f"not a kernel figure path: {path[:80]!r}")
    return path


class _Model(BaseModel):
    # Unknown fields are ignored when reading (a newer writer may add some); `Recorder` refuses
    # them when writing.
    model_config = ConfigDict(extra="ignore")


class Usage(_Model):
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class MessageItem(_Model):
    kind: Literal["message"]
    text: str = ""


class ToolCallItem(_Model):
    kind: Literal["tool_call"]
    call_id: str
    name: str
    arguments: Any = None


class OtherItem(_Model):
    """An output item of another kind (reasoning, ...): only its kind is recorded."""

    kind: str


OutputItem = Union[MessageItem, ToolCallItem, OtherItem]


def cell_status_text(status: CellStatus, duration_s: float | None, *, on_request: bool = False) -> str:
    """How a cell's status reads, in the tool result's header and in exports. `on_request`: the
    cell was interrupted or restarted because a caller cancelled it, not by its time limit."""
    took = f" in {duration_s:.3f} s" if duration_s is not None else ""
    if on_request and status in ("interrupted", "restarted"):
        return "interrupted on request" if status == "interrupted" else "interrupted on request, kernel restarted"
    return {
        "ok": f"ok{took}",
        "error": f"error{took}",
        "interrupted": "interrupted (timeout)",
        "restarted": "timeout, kernel restarted",
        "crashed": "kernel crashed and was restarted",
        "bad_request": "not run",
    }[status]


MAX_TABLE_ROWS = 50
MAX_TABLE_COLUMNS = 20
MAX_TABLE_TEXT_CHARS = 200
"""The bounds of a cell's table: the kernel (tools/inside/kernel_server.py, standard library only,
so it keeps its own copy, tied to these by a test) cuts to them, and the reader refuses more."""
MAX_TABLE_SHAPE = 2**53  # a frame's true size: beyond it a record is not coderoom's

TableText = Annotated[str, Field(max_length=MAX_TABLE_TEXT_CHARS)]


class CellTable(_Model):
    """A cell's DataFrame or Series value as a table, for the page: its first rows and columns as
    text, and its true shape. The sandbox made it, so every size is bounded here: a forged record
    with more is refused by the reader, and a kernel reply with more keeps only its text preview."""

    model_config = ConfigDict(extra="ignore", strict=True)

    kind: Literal["DataFrame", "Series"]
    rows: int = Field(ge=0, le=MAX_TABLE_SHAPE)  # the value's true shape, not what is shown
    columns: int = Field(ge=0, le=MAX_TABLE_SHAPE)
    header: list[TableText] = Field(max_length=MAX_TABLE_COLUMNS)  # the shown columns' names
    index: list[TableText] = Field(max_length=MAX_TABLE_ROWS)  # the shown rows' labels
    data: list[Annotated[list[TableText], Field(max_length=MAX_TABLE_COLUMNS)]] = Field(max_length=MAX_TABLE_ROWS)

    @model_validator(mode="after")
    def _consistent(self) -> CellTable:
        if len(self.index) != len(self.data) or any(len(row) != len(self.header) for row in self.data):
            raise ValueError("a table has one index label per row and one value per column in each row")
        if len(self.data) > self.rows or len(self.header) > self.columns:
            raise ValueError("a table shows no more rows or columns than its shape has")
        return self


class Cell(_Model):
    """One `run_python` cell as the kernel replied, bounded: what exports and `show` read."""

    number: int
    status: CellStatus
    duration_s: float | None = None
    stdout: str = ""
    stderr: str = ""
    value: str | None = None  # the text preview the model read: what old records and `show` have
    table: CellTable | None = None  # a DataFrame or Series value, for the page; absent in older records
    error: str | None = None
    notes: list[str] = Field(default_factory=list)  # what the kernel said: timeouts, restarts
    figures: list[Annotated[str, AfterValidator(_figure_path)]] = Field(default_factory=list)
    state_lost: bool = False  # after this cell the kernel's variables were gone
    fresh_kernel: bool = False  # this cell ran in a new kernel: the previous one had stopped
    interrupted_on_request: bool = False  # cancelled by a caller (Session.interrupt, MCP), not timed out

    @property
    def status_text(self) -> str:
        return cell_status_text(self.status, self.duration_s, on_request=self.interrupted_on_request)

    @property
    def ran_to_completion(self) -> bool:
        """Whether the code ran to its end or its own error (not hung, crashed or refused)."""
        return self.status in ("ok", "error")


ShellStatus = Literal["exited", "running", "timed_out", "not_run", "unknown"]
"""exited: with its exit code; running: left running as a PTY session (`session_id`) when the
tool returned; timed_out: stopped at the call's time limit; not_run: refused before it ran (its
arguments or folder were not valid); unknown: only in records written before shell results were
structured, whose text does not say how the command ended (`legacy`)."""

MAX_COMMAND_CHARS = 1_000_000  # a longer command is not recorded (`command` is None): it was the model's to choose
MAX_SHELL_OUTPUT_CHARS = 20_000  # of a call's output kept in the record; `output_chars` counts all of it
LEGACY_MARKER_ROOM = 100  # older records cut the whole text at 20,000 and added a marker: it fits
MAX_SHELL_NAME_CHARS = 4096  # a folder or a shell's name
MAX_SESSION_ID = 2**31 - 1
MAX_WALL_TIME_S = 10_000_000.0  # far beyond any limit: a record saying more is not coderoom's


class ShellResult(_Model):
    """One `exec_command` or `write_stdin` call as coderoom saw it run: what exports and rerun
    read, never the prose the model read (the SDK's words, which may change with it).

    Every field is bounded, so a forged record with absurd values is refused by the reader (a
    `RecordError` naming the line and the field) rather than reaching an exporter."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    status: ShellStatus
    command: str | None = Field(default=None, max_length=MAX_COMMAND_CHARS)  # exec_command's, as the model gave it
    workdir: str | None = Field(default=None, max_length=MAX_SHELL_NAME_CHARS)
    shell: str | None = Field(default=None, max_length=MAX_SHELL_NAME_CHARS)
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**32 - 1)
    session_id: int | None = Field(default=None, ge=0, le=MAX_SESSION_ID)  # the PTY session it started or wrote to
    wall_time_s: float = Field(default=0.0, ge=0.0, le=MAX_WALL_TIME_S)
    output: str = Field(default="", max_length=MAX_SHELL_OUTPUT_CHARS + LEGACY_MARKER_ROOM)  # stdout and stderr as the tool got them
    output_chars: int = Field(default=0, ge=0, le=2**53)  # of the whole output; beyond len(output): not recorded
    tokens_before_cut: int | None = Field(default=None, ge=0, le=2**53)  # the SDK cut it to max_output_tokens

    @model_validator(mode="after")
    def _consistent(self) -> ShellResult:
        if self.status == "exited" and self.exit_code is None:
            raise ValueError("an exited command has an exit code")
        if self.status == "running" and (self.session_id is None or self.exit_code is not None):
            raise ValueError("a running command has a session id and no exit code")
        if self.status == "not_run" and self.exit_code is not None:
            raise ValueError("a command that did not run has no exit code")
        return self

    @property
    def chars_not_recorded(self) -> int:
        return max(0, self.output_chars - len(self.output))


class OutputResult(_Model):
    path: str
    ok: bool
    detail: str = ""
    size: int | None = None


class Missing(_Model):
    path: str
    reason: str = ""


class _Event(_Model):
    t: float = 0.0  # seconds since the run started


Origin = Literal["agent", "client"]
"""Who made a call: the agent's model, or a live session's client (`coderoom.service`: the web
page, an MCP client, the Python API) calling run_python, exec or a file write directly."""


class _ToolEvent(_Event):
    call_id: str
    name: str
    arguments: Any = None  # the parsed JSON arguments, or the raw string when they were not JSON
    origin: Origin = "agent"


class RunStart(_Event):
    type: Literal["run_start"] = "run_start"
    record_version: int = RECORD_VERSION
    job: dict[str, Any]
    model: str = "?"
    notice: str | None = None
    coderoom_version: str = ""
    run_id: str | None = None  # what ties the sandbox serving the run to this record (`coderoom.recovery`); older records lack it
    # a declared package environment: its declaration and the exact versions installed for it
    # ({"key", "declared": [...], "installed": [{"name", "version"}]}; Docker: "image" for "key", and
    # "unknown" with why for "installed" when its image holds no readable list); None when none was declared
    environment: dict[str, Any] | None = None


class ModelStart(_Event):
    type: Literal["model_start"] = "model_start"
    turn: int


class ModelCall(_Event):
    type: Literal["model_call"] = "model_call"
    turn: int
    input_items: int = 0
    input_chars: int = 0
    duration_s: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    output: list[OutputItem] = Field(default_factory=list)


class ToolStart(_ToolEvent):
    type: Literal["tool_start"] = "tool_start"


class ToolResult(_ToolEvent):
    type: Literal["tool_result"] = "tool_result"
    output: str = ""  # the text the model read, bounded
    cell: Cell | None = None  # run_python: the cell that ran; absent when the kernel was unreachable
    shell: ShellResult | None = None  # exec_command, write_stdin: absent in records written before it
    duration_s: float = 0.0


class Nudge(_Event):
    type: Literal["nudge"] = "nudge"
    missing: list[Missing]


class ExtractRefused(_Event):
    type: Literal["extract_refused"] = "extract_refused"
    detail: str


class Egress(_Event):
    """One connection an allowlisted sandbox made through the host proxy (`coderoom.egress`):
    allowed or refused and why, bytes each way. Host and reason come from the sandbox's request
    (the proxy checked and bounded them): hostile text, shown escaped."""

    type: Literal["egress"] = "egress"
    host: str = Field(default="", max_length=300)
    port: int = 0
    method: str = Field(default="", max_length=100)
    allowed: bool = False
    reason: str = Field(default="", max_length=1000)
    address: str = Field(default="", max_length=100)
    bytes_up: int = 0
    bytes_down: int = 0
    duration_s: float = 0.0
    intercepted: bool = False  # HTTPS the proxy terminated to add a secret (the method is the inner one)


class ModelRetry(_Event):
    """The model server failed in a way worth another try; coderoom waits `wait_s` first."""

    type: Literal["model_retry"] = "model_retry"
    attempt: int
    max_retries: int
    status: int | None = None
    reason: str = ""
    retry_after: float | None = None  # what the server asked for, before coderoom's cap
    wait_s: float = 0.0


class ModelReplyCut(_Event):
    """A final reply used all of max_tokens: continued once (`retried`), else marked as cut."""

    type: Literal["model_reply_cut"] = "model_reply_cut"
    max_tokens: int
    retried: bool = False


MAX_STREAM_OFF_REASON_CHARS = 200
"""Of a model server's words kept in `model_stream_off`: the writer cuts them there
(`models.guard`); a record holding more is not coderoom's (`coderoom show` would print it all)."""


class ModelStreamOff(_Event):
    """The model server does not stream: it refused a streaming request (`status`, its words in
    `reason`, bounded) or answered one with nothing a stream carries (`status` None). The request
    was sent again without streaming, and so is every later one to that model (`models.guard`)."""

    type: Literal["model_stream_off"] = "model_stream_off"
    status: int | None = None
    reason: str = Field(default="", max_length=MAX_STREAM_OFF_REASON_CHARS)


class ContextTrimmed(_Event):
    """The next request did not fit the model's context: old tool outputs were trimmed for it."""

    type: Literal["context_trimmed"] = "context_trimmed"
    context_size: int
    source: str = ""  # where the size came from: the server's endpoint, or the job
    method: str = ""  # how tokens were counted
    budget: int = 0  # tokens the request may use: the context less the reply reserve and a margin
    tokens_before: int = 0
    tokens_after: int = 0
    outputs_trimmed: int = 0
    items_dropped: int = 0
    chars_removed: int = 0


class SessionOpen(_Event):
    """A live session started (after run_start): its id, whether its sandbox came warm from the
    pool, and the workspace files it was opened with."""

    type: Literal["session_open"] = "session_open"
    session_id: str
    pooled: bool = False
    files: list[str] = Field(default_factory=list)


class AskStart(_Event):
    """A session's client asked the agent something: the turns that follow answer it."""

    type: Literal["ask_start"] = "ask_start"
    request: str


class AskEnd(_Event):
    type: Literal["ask_end"] = "ask_end"
    status: str  # ok, failed (the model declined or ran out of turns), error
    final_output: str = ""
    error: str | None = None
    history_items: int = 0  # conversation items the next ask starts from
    history_dropped: int = 0  # old items dropped to keep the conversation within its bound


class FileWritten(_Event):
    """A session's client wrote a workspace file (uploaded content or an allowed host file)."""

    type: Literal["file_written"] = "file_written"
    path: str
    size: int
    origin: Origin = "client"


class FileRead(_Event):
    """A session's client read a workspace file (its bytes went to the client, not the record)."""

    type: Literal["file_read"] = "file_read"
    path: str
    size: int


class FilesListed(_Event):
    """A session's client listed the workspace."""

    type: Literal["files_listed"] = "files_listed"
    entries: int


class ModelStream(_Event):
    """Never written to a record: a reply arriving as a stream (`models.streaming`), for the CLI's
    progress line and the page. `tokens`: deltas so far (one token each on llama.cpp and OpenAI's
    API); `rate`: tokens/s since the first; `text`: the reply's text since the last report."""

    type: Literal["model_stream"] = "model_stream"
    tokens: int = 0
    chars: int = 0
    rate: float | None = None
    elapsed_s: float = 0.0  # since the request was sent
    text: str = ""


class EventsLost(_Event):
    """Never written to a record: what a slow subscriber of a live session gets in place of the
    `count` oldest events its bounded queue dropped."""

    type: Literal["events_lost"] = "events_lost"
    count: int


RECOVERED = "recovered"
"""A run_end status: the run's owner died (kill -9, an OOM kill, a power loss) and a later
`serve`, `mcp` or `sandbox prune` saved its workspace into the run folder (`coderoom.recovery`);
`cause` says what is known of the death. A status is a plain string, so older readers show it."""


class RunEnd(_Event):
    type: Literal["run_end"] = "run_end"
    status: str  # ok, failed, error, interrupted, RECOVERED
    final_output: str = ""
    error: str | None = None
    outputs: list[OutputResult] = Field(default_factory=list)
    signal: str | None = None  # the signal that interrupted the run (SIGINT, SIGTERM, SIGHUP)
    saved: list[str] = Field(default_factory=list)  # what was saved in the run folder
    incomplete: str | None = None  # why the save was cut short, when it was
    cause: str | None = None  # a recovered run: how its owner ended, as far as is known
    limits_hit: list[str] = Field(default_factory=list)  # sandbox limits commands ran into
    usage: Usage = Field(default_factory=Usage)
    duration_s: float = 0.0


Event = Union[
    RunStart, ModelStart, ModelCall, ModelRetry, ModelReplyCut, ModelStreamOff, ContextTrimmed, ToolStart, ToolResult,
    Nudge, ExtractRefused, SessionOpen, AskStart, AskEnd, FileWritten, FileRead, FilesListed, EventsLost, Egress, RunEnd,
    ModelStream,
]
Listener = Callable[[Event], None]

EVENT_TYPES: dict[str, type[_Event]] = {
    model.model_fields["type"].default: model
    for model in (RunStart, ModelStart, ModelCall, ModelRetry, ModelReplyCut, ModelStreamOff, ContextTrimmed, ToolStart,
                  ToolResult, Nudge, ExtractRefused, SessionOpen, AskStart, AskEnd, FileWritten, FileRead,
                  FilesListed, EventsLost, Egress, RunEnd, ModelStream)
}
"""Each event type by its `type` value. A new event type is a model here, and nothing more."""

LIVE_ONLY = frozenset({"model_stream", "events_lost"})
"""Event types listeners hear and the record never holds: progress, not what happened."""
