"""`coderoom rerun RUN_DIR`: the same analysis on the same or new inputs, with no model.

A run folder may come from anywhere and its run.jsonl is plain editable text, so the record is
data, never authority. From it the rerun takes the steps (the replay script), the job's name,
prompt and declared outputs, and the workspace paths of its inputs. It never takes:

* the sandbox: backend, limits and network come from the user's flags and the defaults
  (`Limits()`, with the whole replay's timeout). What the recorded job asked for beyond them
  (network, more memory, another backend or image) is listed in a note with the flag that
  would grant it;
* host paths: each input is the user's `--input HOST=WORKSPACE` (which must name one of the
  run's own inputs: `replacement_inputs`), or else the run folder's own
  archived copy (the file or folder at that workspace path in its workspace.tar, as the run
  left it), extracted through the exit policy (`hostile.exits`) under the workspace size limit. A missing
  copy is a usage error, never a fall-back to the recorded host path.

The replay script (`export.script`) runs as one command in that fresh sandbox; the declared
outputs come back through `save_workspace` (safe extraction), beside `workspace.tar` and the
replay's log, so a rerun directory looks like a run directory.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from ..artifacts import WORKSPACE_ARCHIVE, save_workspace, saved_checks
from ..errors import JobError, RecordError, UsageError
from ..hostile.archive import ArchiveError
from ..hostile.exits import extract_leaving_out
from ..hostile.names import UnsafePath, safe_relative_path
from ..hostile.text import terminal_safe
from ..jobs import Job, build_job
from ..outputs import OutputCheck
from ..record import read_record
from ..record.events import SessionOpen
from ..sandboxes.flags import SandboxFlags
from ..sandboxes.limits import LIMIT_NAMES, Limits, parse_limits
from ..sandboxes.registry import backend_names, get_backend
from ..sandboxes.defaults import default_backend_name
from ..sandboxes.session import open_session
from ..sandboxes.spec import SandboxSpec
from ..workspace import fresh_manifest, stage_inputs
from . import REPLAY_TIMEOUT
from .replay_error import replay_error
from .script import build_script
from .steps import load_steps

REPLAY_PATH = ".coderoom/replay.py"
LOG_FILE = "replay.log"
# what a rerun compares by size with the recorded job's limits (its timeout is the whole
# replay's; network and the allowlist are granted or not, never by a record)
COMPARED = [name for name in LIMIT_NAMES if name not in ("timeout", "network", "egress")]
MAX_LISTED = 20  # inputs named in an error about a rerun's --input


@dataclass
class RerunResult:
    out_dir: Path
    exit_code: int
    checks: list[OutputCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the replay's own first error (`replay_error`), one line

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and all(c.ok for c in self.checks)


def granted_sandbox(
    backend: str | None, timeout: float | None, network: bool, limits: Sequence[str] = ()
) -> SandboxSpec:
    """The rerun's sandbox from the user's choices alone (`--limit NAME=VALUE` flags and their
    short forms); the replay is one command, so the per-command time limit is the whole replay's."""
    replay = Limits(timeout=REPLAY_TIMEOUT)
    granted = SandboxFlags(limits, {"timeout": timeout, "network": network or None}).limits(replay)
    return SandboxSpec(backend=backend or default_backend_name(), limits=granted)


def _option_defaults() -> dict[str, object]:
    """Every offered backend's option defaults by name, from its options model (the backends
    installed here, never one a record names): a version 1 record kept Docker's at the top level."""
    defaults: dict[str, object] = {}
    for name in backend_names():
        defaults.update(get_backend(name).options_model()().model_dump())
    return defaults


def sandbox_notes(recorded: Any, granted: SandboxSpec) -> list[str]:
    """What the recorded job's sandbox asked for that this rerun does not grant, and how to."""
    if not isinstance(recorded, dict):
        return []
    notes = []
    backend = recorded.get("backend")
    if isinstance(backend, str) and backend != granted.backend:
        notes.append(
            f"the run used sandbox backend {backend[:40]!r}; this rerun uses {granted.backend!r} "
            "(a record never chooses the backend: choose with --sandbox)"
        )
    # backend tables ([sandbox.docker] image and packages; record version 1 kept them top level)
    defaults = _option_defaults()
    options = {
        k: v for k, v in recorded.items()
        if k not in ("backend", "limits", "environment") and v and (k not in defaults or defaults[k] != v)
    }
    environment = recorded.get("environment")
    declared = environment.get("packages") if isinstance(environment, dict) else None
    if isinstance(declared, list) and declared:
        shown = ", ".join(repr(str(p)[:40]) for p in declared[:5]) + (", ..." if len(declared) > 5 else "")
        notes.append(f"the run declared packages ({shown}); a rerun installs none (a record never chooses what is installed)")
    if options:
        notes.append(f"the run's sandbox options ({', '.join(sorted(options))[:80]}) are not reused: "
                     "this rerun uses the backend's defaults")
    try:
        asked = parse_limits(recorded.get("limits") or {}, source="the record's limits")
    except UsageError:
        return [*notes, "the record's sandbox limits are not valid; they were ignored"]
    if asked.network and not granted.limits.network:
        notes.append("the recorded job had network access; not granted: pass --network to allow it")
    if asked.egress is not None and granted.limits.egress is None:
        notes.append("the recorded job reached hosts through an allowlist; this rerun grants none "
                     "(a record never chooses a network)")
    for name in sorted(COMPARED):
        wanted, given = getattr(asked, name), getattr(granted.limits, name)
        if wanted > given:
            notes.append(
                f"the recorded job asked for {name}={wanted}; this rerun has {given}: "
                f"pass --limit {name}={wanted} to grant it"
            )
    return notes


def archived_inputs(
    run_dir: Path, paths: list[str], into: Path, max_bytes: int
) -> tuple[dict[str, Path], list[tuple[str, str]]]:
    """The run folder's own copies of the inputs at `paths`, extracted from its workspace.tar
    into `into` through the exit policy (a planted repository or hook in an input folder stays
    out), and what the policy left out: a usage error names the first input that is not there."""
    archive = run_dir / WORKSPACE_ARCHIVE
    usable = archive.is_file() and not archive.is_symlink() and archive.stat().st_size <= max_bytes
    found: set[str] = set()
    left_out: list[tuple[str, str]] = []
    if paths and usable:
        try:
            report = extract_leaving_out(archive, into, members=paths, max_bytes=max_bytes, note=False)
        except ArchiveError as exc:
            raise RecordError(f"{archive}: {exc}") from None
        found = {p for p in paths for name in report.extracted if name == p or name.startswith(p + "/")}
        left_out = report.refused
    for path in paths:
        if path not in found:
            raise UsageError(
                f"input {path}: the run folder has no archived copy in its {WORKSPACE_ARCHIVE} "
                f"(or it is over {max_bytes} bytes); give the file with --input HOST_FILE={path}"
            )
    return {path: into / path for path in paths}, left_out


def recorded_input_paths(job: dict[str, Any]) -> list[str]:
    """The workspace paths of the recorded job's inputs (their host paths are never read)."""
    inputs = job.get("inputs")
    try:
        return [str(safe_relative_path(key)) for key in inputs] if isinstance(inputs, dict) else []
    except (UnsafePath, TypeError) as exc:
        raise RecordError(f"run.jsonl: an input's workspace path is not usable: {exc}") from None


def session_input_paths(run_dir: Path) -> list[str]:
    """A live session's inputs: the workspace paths its client wrote when it opened it (its
    session_open event; a run's record has none). Their content comes from workspace.tar."""
    try:
        return [
            str(safe_relative_path(path))
            for event in read_record(run_dir).events if isinstance(event, SessionOpen)
            for path in event.files
        ]
    except UnsafePath as exc:
        raise RecordError(f"run.jsonl: a session file's workspace path is not usable: {exc}") from None


def run_input_paths(run_dir: Path, start: dict[str, Any]) -> list[str]:
    """The workspace paths a rerun can replace: the recorded job's inputs and a session's files."""
    return list(dict.fromkeys(recorded_input_paths(start["job"]) + session_input_paths(run_dir)))


def check_replacements(replaced: Sequence[str], known: Sequence[str], flag: str | None = None) -> None:
    """Refuse an input that is not one of the run's own: the replay never reads it, so the old
    data would be analysed and the rerun would look like a success on the new file."""
    for path in replaced:
        if path not in known:
            given = f"--input {flag!r}" if flag is not None else f"input {path!r}"
            raise UsageError(f"{given}: {path!r} is not one of the run's inputs; {_listing(known)}")


def _listing(known: Sequence[str]) -> str:
    """The run's inputs as the user would write the flag (names from a record: bounded)."""
    if not known:
        return "the run has no inputs to replace"
    shown = [f"NEW_FILE={path[:200]}" for path in known[:MAX_LISTED]]
    more = f" (and {len(known) - MAX_LISTED} more)" if len(known) > MAX_LISTED else ""
    return "replace one with --input " + " or --input ".join(shown) + more


def replacement_inputs(run_dir: Path, flags: Sequence[str]) -> dict[str, Path]:
    """A rerun's `--input NEW_FILE=WORKSPACE_PATH` flags as {workspace path: host path}. Unlike
    `run`'s, the `=` is required (a bare file would go to input/NAME, which the replay never
    reads), the workspace path must be one of the run's inputs, and the file must exist."""
    if not flags:
        return {}
    start, _ = load_steps(run_dir)
    known = run_input_paths(run_dir, start)
    inputs: dict[str, Path] = {}
    for flag in flags:
        host, sep, workspace = flag.partition("=")
        if not sep or not host:
            raise UsageError(f"--input {flag!r}: a rerun replaces one of the run's inputs; {_listing(known)}")
        try:
            path = str(safe_relative_path(workspace))
        except UnsafePath:
            path = workspace
        check_replacements([path], known, flag)
        host_path = Path(host).expanduser().absolute()
        if not host_path.exists():
            raise JobError(f"--input {host_path}={workspace}: {host_path} does not exist")
        inputs[path] = host_path
    return inputs


def rerun_job(
    run_dir: Path, start: dict[str, Any], inputs: dict[str, Path], sandbox: SandboxSpec, archive_dir: Path
) -> tuple[Job, list[str]]:
    """The rerun's job and its notes: the recorded job's name, prompt and outputs (from the
    run_start event `start`); the user's sandbox; the user's inputs, else the run folder's
    archived copies (extracted into `archive_dir`), for a run's inputs and a session's files."""
    recorded = start["job"]
    wanted = run_input_paths(run_dir, start)
    check_replacements(list(inputs), wanted)
    missing = [p for p in wanted if p not in inputs]
    archived, left_out = archived_inputs(run_dir, missing, archive_dir, sandbox.limits.workspace_size)
    data = {key: recorded.get(key) for key in ("name", "prompt", "outputs") if key in recorded}
    job = build_job(
        {**data, "inputs": {**archived, **inputs}, "sandbox": sandbox},
        source=f"{run_dir}/run.jsonl with the rerun's flags",
    )
    notes = sandbox_notes(recorded.get("sandbox"), job.sandbox)
    notes += [f"input {path}: the run folder's archived copy, as the run left it" for path in archived]
    notes += [terminal_safe(f"left out of the archived inputs: {name}: {reason}") for name, reason in left_out]
    return job, notes


async def rerun(
    run_dir: Path,
    out_dir: Path,
    *,
    inputs: dict[str, Path] | None = None,
    backend: str | None = None,
    timeout: float | None = None,
    network: bool = False,
    limits: Sequence[str] = (),
) -> RerunResult:
    """Replay `run_dir` in a fresh sandbox; outputs, workspace.tar and replay.log go to `out_dir`."""
    sandbox = granted_sandbox(backend, timeout, network, limits)
    start, steps = load_steps(run_dir)
    script = build_script(start, steps).encode("utf-8")
    with tempfile.TemporaryDirectory(prefix="coderoom-rerun-inputs-") as archive_dir:
        job, notes = rerun_job(run_dir, start, inputs or {}, sandbox, Path(archive_dir))
        out_dir.mkdir(parents=True, exist_ok=True)
        async with open_session(job.sandbox, fresh_manifest()) as session:
            await stage_inputs(session, job.inputs)
            await session.mkdir(Path(REPLAY_PATH).parent, parents=True)
            await session.write(Path(REPLAY_PATH), io.BytesIO(script))
            done = await session.exec("python3", "-I", REPLAY_PATH, shell=False, timeout=timeout)
            notes += (await save_workspace(session, out_dir, job.sandbox.limits.workspace_size, job.outputs)).notes
    log = done.stdout + (b"\n--- stderr ---\n" + done.stderr if done.stderr else b"")
    (out_dir / LOG_FILE).write_bytes(log)
    error = replay_error(done.stderr, [step.run.error for step in steps if step.run and step.run.error])
    return RerunResult(out_dir, done.exit_code, saved_checks(out_dir, job.outputs), notes, error)
