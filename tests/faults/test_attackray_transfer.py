"""Ray batch pass (2026-12-06), the driver's side of `--ray` without a cluster: what a node sends
back (a run folder tar, record lines to the `AttemptLog`) and what `--resume` reads back
(batch.jsonl) are hostile, hand-built here as an adversary controlling a job's sandbox, a node or
the batch folder would build them. See docs/security.md "Ray batch pass".
"""

from __future__ import annotations

import io
import os
import json
import tarfile
from pathlib import Path

import pytest

from coderoom.batch.ledger import LEDGER_FILE, read_ledger
from coderoom.batch.on_node import MAX_PARTIAL_BYTES, AttemptLog, Place
from coderoom.cluster.transfer import MAX_RUN_FOLDER_BYTES, unpack_run_folder
from coderoom.errors import RecordError
from coderoom.hostile.archive import MAX_FILES, ArchiveError
from coderoom.hostile.exits import LEFT_OUT_NOTE
from coderoom.hostile.tree import WorkspaceLimitError

DIGEST = "ab" * 32
NODE = "cd" * 28


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def _info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size, link
    return info


def test_a_run_folder_tar_from_a_node_writes_plain_files_only_and_nothing_outside_it(tmp_path: Path) -> None:
    run_dir, outside = tmp_path / "out" / "run", tmp_path / "escaped"
    members = [
        (_info("run.jsonl", size=2), b"{}"),
        (_info("../../escaped", size=4), b"evil"),
        (_info(str(outside), size=4), b"evil"),
        (_info("output", tarfile.DIRTYPE), b""),
        (_info("output/up", tarfile.SYMTYPE, link=str(tmp_path)), b""),
        (_info("output/up/escaped", size=4), b"evil"),  # written through the link, if it were made
        (_info("output/passwd", tarfile.LNKTYPE, link="/etc/passwd"), b""),
        (_info("output/null", tarfile.CHRTYPE), b""),
        (_info("output/fifo", tarfile.FIFOTYPE), b""),
        (_info(LEFT_OUT_NOTE, size=10), b"all good\n."),  # a planted note is replaced by the driver's
    ]
    unpack_run_folder(_tar(members), run_dir)
    assert not outside.exists() and not (tmp_path / "out" / "escaped").exists()
    written = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    assert written == sorted(["run.jsonl", "output", "output/up", "output/up/escaped", LEFT_OUT_NOTE])
    assert (run_dir / "output/up").is_dir() and not (run_dir / "output/up").is_symlink()
    note = (run_dir / LEFT_OUT_NOTE).read_text()
    for refused in ("output/passwd", "output/null", "output/fifo"):
        assert refused in note
    assert "all good" not in note


def test_a_run_folder_tar_of_more_files_than_max_files_writes_max_files(tmp_path: Path) -> None:
    data = _tar([(_info(f"f{index}"), b"") for index in range(MAX_FILES + 5)])
    unpack_run_folder(data, tmp_path / "run")
    assert sum(1 for _ in (tmp_path / "run").iterdir()) == MAX_FILES + 1  # and the note
    assert f"more than {MAX_FILES} files" in (tmp_path / "run" / LEFT_OUT_NOTE).read_text()


def test_a_run_folder_tar_cut_short_is_an_archive_error_the_driver_records(tmp_path: Path) -> None:
    """A header saying 1 GiB with 4 bytes behind it (a node's tar cut short): refused on its
    header, never read, and an `ArchiveError`, which `RayJobs` records as the job's error; it
    was tarfile's own ReadError, which nothing caught, so the whole batch stopped on a traceback
    with no end line for the job."""
    header = _info("workspace.tar", size=MAX_RUN_FOLDER_BYTES + 1).tobuf(tarfile.PAX_FORMAT)
    with pytest.raises(ArchiveError, match="cut short"):
        unpack_run_folder(header + b"evil", tmp_path / "run")
    assert not (tmp_path / "run" / "workspace.tar").exists()
    whole = _tar([(_info("run.jsonl", size=2048), b"x" * 2048)])
    with pytest.raises(ArchiveError, match="cut short"):
        unpack_run_folder(whole[:1024], tmp_path / "run2")


def test_run_folder_bytes_over_the_cap_are_refused_before_any_is_extracted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import coderoom.cluster.transfer as transfer

    monkeypatch.setattr(transfer, "MAX_RUN_FOLDER_BYTES", 1024)
    data = _tar([(_info("big", size=30 * 1024 * 1024), b"x" * 30 * 1024 * 1024)])
    with pytest.raises(WorkspaceLimitError):
        unpack_run_folder(data, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_attempt_s_record_lines_go_to_its_own_job_only_and_are_bounded() -> None:
    log = AttemptLog()
    token = log.claim()  # the driver's (`cluster.driver_only`)
    log.open("a", token), log.open("b", token)
    log.begin("a", "1111", Place(NODE, "127.0.0.1"))
    log.begin("b", "2222", Place(NODE, "127.0.0.1"))
    log.line("b", "1111", '{"type":"run_end"}\n')  # attempt 1111 is job a's: not b's
    log.line("a", "2222", '{"type":"run_end"}\n')
    log.line("c", "1111", "x\n")  # a job no attempt began for
    log.line("a", "1111", "x" * (MAX_PARTIAL_BYTES - 1))
    log.line("a", "1111", "yy")  # over the bound: dropped
    assert log.take("b")["2222"].lines == []
    assert log.take("a")["1111"].size == MAX_PARTIAL_BYTES - 1
    assert log.take("c") == {}


def _end(**changes: object) -> str:
    line = {"event": "end", "job": "a", "digest": DIGEST, "run_dir": "a-1", "t": 1.0, "status": "ok",
            "duration_s": 1.0, "outputs_ok": 1, "outputs": 1, "tokens": 1, "node": NODE, "host": "127.0.0.1",
            "lost": []}  # fmt: skip
    line.update(changes)
    return json.dumps(line) + "\n"


@pytest.mark.parametrize(
    "forged",
    [
        {"run_dir": "../../home/user/.ssh"},
        {"run_dir": "/etc"},
        {"host": "evil.example/x"},
        {"host": "a b"},
        {"node": "../x"},
        {"lost": [{"run_dir": "../x", "node": NODE, "host": "h"}]},
        {"lost": [{"run_dir": "x", "node": NODE, "host": "h", "backend": "none"}]},
        {"lost": [{"run_dir": "x", "node": NODE, "host": "h"}] * 17},
        {"backend": "none"},
        {"limits": {"memory": 1}},
        {"tokens": -1},
    ],
    ids=lambda forged: next(iter(forged)),
)
def test_resume_refuses_a_forged_batch_jsonl_line_naming_a_path_backend_or_limit(tmp_path: Path, forged: dict) -> None:
    (tmp_path / LEDGER_FILE).write_text(_end() + _end(**forged))
    with pytest.raises(RecordError, match="line 2"):
        read_ledger(tmp_path)


class _Log:
    """The AttemptLog handle's shape, for `run_on_node` called here rather than as a Ray task."""

    class line:  # noqa: N801
        @staticmethod
        def remote(*args: object) -> None:
            return None

    begin = line


def test_a_run_folder_over_the_cap_still_sends_its_record_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox may fill its workspace to 2 GiB (workspace_size), past MAX_RUN_FOLDER_BYTES: the
    run folder cannot come back, but its record (host-written) must, or nothing on the driver
    says what the code did. It came back as nothing, the record included."""
    import coderoom.batch.on_node as on_node
    import coderoom.cluster.transfer as transfer

    monkeypatch.setattr(transfer, "MAX_RUN_FOLDER_BYTES", 64 * 1024)
    monkeypatch.setattr(on_node, "prepare_backend", lambda sandbox, say: None)

    async def filled(entry, run_dir, environ, listeners=(), inputs_from=None, budget=None):  # type: ignore[no-untyped-def]
        run_dir.mkdir()
        (run_dir / "run.jsonl").write_text('{"type":"run_start"}\n')
        (run_dir / "workspace.tar").write_bytes(b"\0" * 128 * 1024)  # the sandbox's workspace, filled
        return on_node.JobOutcome(entry.key, run_dir.name, "ok")

    monkeypatch.setattr(on_node, "run_one", filled)
    (tmp_path / "shared.toml").write_text('prompt = "p"\nmodel = "offline"\n')
    (tmp_path / "jobs.jsonl").write_text('{"name": "a"}\n')
    from coderoom.batch.manifest import batch_entries
    from coderoom.batch.transfer import pack_inputs

    entry = batch_entries([tmp_path / "jobs.jsonl"], tmp_path / "shared.toml")[0]
    result = on_node.run_on_node(entry, pack_inputs(entry.job), "a-1", {}, _Log(), Place(NODE, "h"), "1111")
    assert result.outcome.status == "error" and "only its record was kept" in (result.outcome.error or "")
    assert result.folder is not None
    transfer.unpack_run_folder(result.folder, tmp_path / "back")
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == ["run.jsonl"]


def test_ray_auto_refuses_a_cluster_address_file_another_user_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/tmp/ray is anyone's to create: another local user who writes ray_current_cluster there
    would have `--ray auto` send the model key and every job's inputs to a cluster of theirs."""
    from coderoom.cluster.connect import _resolved
    from coderoom.errors import UsageError

    if os.getuid() != 0:
        pytest.skip("needs root to give the file to another user")
    (tmp_path / "ray").mkdir()
    planted = tmp_path / "ray" / "ray_current_cluster"
    planted.write_text("127.0.0.1:6379\n")
    os.chown(planted, 65534, 65534)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    with pytest.raises(UsageError, match="owned by another user"):
        _resolved("auto")
    os.chown(planted, os.getuid(), os.getgid())
    assert _resolved("auto") == "127.0.0.1:6379"


def test_the_attempt_log_keeps_no_line_the_driver_could_not_write_as_its_ascii_record() -> None:
    """A node that sends a non-ASCII line (its own events are ASCII JSON, `record.writer.encode`)
    must not stop the batch: the driver writes a lost attempt's lines as ASCII."""
    log = AttemptLog()
    token = log.claim()  # the driver's (`cluster.driver_only`)
    log.open("a", token)
    log.begin("a", "1111", Place(NODE, "127.0.0.1"))
    log.line("a", "1111", '{"type":"note","text":"caf\u00e9"}\n')
    log.line("a", "1111", '{"type":"note"}\n')
    assert log.take("a")["1111"].lines == ['{"type":"note"}\n']


def test_resume_runs_only_this_batch_s_jobs_whatever_batch_jsonl_says(tmp_path: Path) -> None:
    """Forged end lines for a job not in the batch, or a job's end twice: no job is added or run
    twice; a job is skipped only when its last end is ok with its own settings' digest."""
    from coderoom.batch.manifest import batch_entries
    from coderoom.batch.runner import plan_batch

    (tmp_path / "e.csv").write_text("timestamp,energy_kwh\n")
    (tmp_path / "shared.toml").write_text('prompt = "p"\nmodel = "offline"\n')
    (tmp_path / "jobs.jsonl").write_text('{"name": "a"}\n{"name": "b"}\n')
    entries = batch_entries([tmp_path / "jobs.jsonl"], tmp_path / "shared.toml")
    a, b = entries
    out = tmp_path / "out"
    out.mkdir()
    (out / LEDGER_FILE).write_text(
        _end(job="zzz", digest=a.digest)
        + _end(job="a", digest=a.digest, run_dir="a-1")
        + _end(job="a", digest=a.digest, run_dir="a-2")
        + _end(job="b", digest=DIGEST)  # ok, but with other settings than b's
    )
    plan = plan_batch(entries, out, resume=True)
    assert [entry.key for entry in plan.to_run] == ["b"]
    assert [(o.key, o.run_dir) for o in plan.earlier] == [("a", "a-2")]


def test_what_the_node_s_own_exit_left_out_is_still_in_the_driver_s_note_escaped(tmp_path: Path) -> None:
    """A node's run folder holds its note (its exit kept output/.git in): the driver refuses the
    file as a name coderoom writes, and says the node's lines in its own note, escaped; it said
    only that its own note was left out, and the repository went unmentioned."""
    node_note = "coderoom left these out: ...\noutput/.git/config: VCS metadata\n\x1b]0;owned\x07: \x1b[31mred\nno separator\n"
    members = [(_info("run.jsonl", size=2), b"{}"), (_info(LEFT_OUT_NOTE, size=len(node_note.encode())), node_note.encode())]
    unpack_run_folder(_tar(members), tmp_path / "run")
    note = (tmp_path / "run" / LEFT_OUT_NOTE).read_text()
    assert "output/.git/config: VCS metadata (on its node)" in note
    assert "\x1b" not in note and "no separator" not in note
    assert f"{LEFT_OUT_NOTE}: named" not in note
