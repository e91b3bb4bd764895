"""The run record as the ordered list of things the agent did: what the exporters read.

`run.jsonl` is written by coderoom, but a run directory may come from anywhere: the reader
validates every event (`coderoom.record.reader`), only a finished run is exported, and nothing in
it is trusted as a path on the host. `run_python` steps read the recorded `Cell` and shell steps
the recorded `ShellResult`, never the prose the model read (older records get both from
`record.legacy` on reading).
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from ..hostile.archive import each_member, open_plain
from ..hostile.exits import exit_policy, tar_entry
from ..record import read_record
from ..record.events import Cell, MessageItem, ModelCall, ShellResult, ToolResult

WORKSPACE_ARCHIVE = "workspace.tar"
MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_IMAGES = 1000  # PNG members of a workspace.tar an export looks at
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

Kind = Literal["message", "python", "shell", "stdin", "image", "other"]


@dataclass
class Step:
    """One thing the agent did (or said), in order."""

    kind: Kind
    source: str = ""  # the code, the command, the message text or the image path
    output: str = ""  # what the tool returned, without transport headers
    tool: str = ""
    workdir: str | None = None
    shell: str | None = None
    exit_code: int | None = None
    not_replayed: str | None = None  # why a shell step is not replayed
    note: str | None = None  # how a shell step ended: left running, or (no output) timed out or refused
    run: Cell | None = None  # run_python: the cell that ran (None: the kernel was unreachable)

    @property
    def cell(self) -> int | None:
        return self.run.number if self.run else None

    @property
    def status(self) -> str:
        """run_python: ok / error / interrupted (timeout) / ..."""
        return self.run.status_text if self.run else ""

    @property
    def images(self) -> list[str]:
        """Workspace paths of the figures the cell made."""
        return list(self.run.figures) if self.run else []

    @property
    def lost_state(self) -> bool:
        """After this step the kernel's variables were gone (restart, crash, vanished kernel)."""
        return self.run is not None and self.run.state_lost

    @property
    def found_kernel_restarted(self) -> bool:
        """This cell ran in a fresh kernel because the previous one had stopped."""
        return self.run is not None and self.run.fresh_kernel

    @property
    def replayable(self) -> bool:
        """Whether a replay should run this step: not cells that hung or crashed the kernel,
        not commands that were left running or were fed interactively."""
        if self.kind == "python":
            return self.run is not None and self.run.ran_to_completion
        if self.kind == "shell":
            return self.not_replayed is None
        return False


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


NOT_REPLAYED = {
    "running": "still running when the agent moved on",
    "not_run": "it did not run",
}
NOTES = {
    "running": "[still running when the tool returned]",
    "timed_out": "[timed out: stopped at the call's time limit]",
    "not_run": "[not run: its arguments or folder were refused]",
}


def shell_output(result: ShellResult) -> str:
    """The recorded output, with a line saying how much more there was when it was cut."""
    cut = result.chars_not_recorded
    return result.output + (f"\n[... {cut} more characters not recorded ...]" if cut else "")


def _shell_step(result: ShellResult) -> Step:
    not_replayed = NOT_REPLAYED.get(result.status)
    if result.command is None and not_replayed is None:
        not_replayed = "its command was not recorded"
    output = shell_output(result)
    note = NOTES.get(result.status) if result.status == "running" or not output else None
    return Step(
        kind="shell", tool="exec_command", source=result.command or "", output=output, workdir=result.workdir,
        shell=result.shell, exit_code=result.exit_code, not_replayed=not_replayed, note=note,
    )


def step_of(event: ToolResult) -> Step:
    """The step of one `tool_result` event."""
    name, output = event.name, event.output
    arguments = event.arguments if isinstance(event.arguments, dict) else {}
    if name == "exec_command":  # the reader gives every exec_command result its shell result
        return _shell_step(event.shell or ShellResult(status="not_run"))
    if name == "run_python":
        return Step(kind="python", tool=name, source=_text(arguments.get("code")), output=output, run=event.cell)
    if name == "write_stdin":
        session = arguments.get("session_id")
        chars = _text(arguments.get("chars"))
        text = shell_output(event.shell) if event.shell else output  # older records: what the model read
        return Step(kind="stdin", tool=name, source=f"session {session}: {chars!r}", output=text)
    if name == "view_image":
        return Step(kind="image", tool=name, source=_text(arguments.get("path")), output=output)
    return Step(kind="other", tool=name or "?", source=str(arguments)[:2000], output=output)


def load_steps(run_dir: Path) -> tuple[dict[str, Any], list[Step]]:
    """The run_start event (as a dict) and the steps of a finished run, in order; a
    `RecordError` for a record that is malformed or of a run that did not finish."""
    record = read_record(run_dir)
    start = record.require_finished()
    steps: list[Step] = []
    for event in record.events:
        if isinstance(event, ModelCall):
            for item in event.output:
                if isinstance(item, MessageItem) and item.text.strip():
                    steps.append(Step(kind="message", source=item.text))
        elif isinstance(event, ToolResult):
            steps.append(step_of(event))
    return start.model_dump(mode="json"), steps


class WorkspaceImages:
    """PNG files read from the run's workspace.tar by member name; never extracted to disk, and
    only those the exit policy (`hostile.exits`) lets out of the workspace.

    The archive is hostile (a run folder from anywhere): it must be an uncompressed tar, its
    members are read one at a time up to MAX_MEMBERS, and only MAX_IMAGES PNG names are kept."""

    def __init__(self, run_dir: Path) -> None:
        archive = run_dir / WORKSPACE_ARCHIVE
        self._tar = open_plain(archive) if archive.is_file() and not archive.is_symlink() else None
        self._members: dict[str, tarfile.TarInfo] = {}
        if self._tar is not None:
            entries = []  # every member: the exit policy finds a planted repository from its siblings
            for member in each_member(self._tar):
                entries.append(tar_entry(member))
                name = PurePosixPath(member.name.lstrip("/"))
                if member.isreg() and name.suffix == ".png" and ".." not in name.parts and len(self._members) < MAX_IMAGES:
                    self._members[name.as_posix().removeprefix("./")] = member
            policy = exit_policy(entries)
            self._members = {key: member for key, member in self._members.items() if policy.refusal(key) is None}

    def png(self, path: str) -> bytes | None:
        """The PNG at workspace path `path` (absolute /workspace/... accepted), if it is one."""
        key = PurePosixPath(path.removeprefix("/workspace/")).as_posix().removeprefix("./")
        member = self._members.get(key)
        if self._tar is None or member is None or member.size > MAX_IMAGE_BYTES:
            return None
        handle = self._tar.extractfile(member)
        data = handle.read(MAX_IMAGE_BYTES + 1) if handle else b""
        return data if data.startswith(PNG_MAGIC) else None

    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()
