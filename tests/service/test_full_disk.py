"""Errors that tell the truth on a full disk: with the runs folder on a small tmpfs this test
mounts (root only), a close whose save the disk refuses is an error naming the disk and what is
kept where, and the session stays open until a close can save it; an open that cannot write its
run folder opens nothing and leaves no folder. Every surface says it: the Python API raises,
MCP answers isError, serve answers 507. Real local sandboxes."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from coderoom import Session
from coderoom.artifacts import SaveReport, _write_and_extract
from coderoom.errors import RunFolderUnavailable, SaveFailed
from coderoom.record import read_record
from full_disk import DISK, fill, small_disk  # noqa: F401 (a fixture)


async def test_a_close_the_disk_refuses_is_an_error_and_the_session_stays_open(small_disk: Path) -> None:
    runs = small_disk / "runs"
    session = await Session.open(model="offline", runs_dir=runs)
    await session.run_python("x = 1\nopen('data.bin', 'wb').write(bytes(range(256)) * 4096)")  # 1 MiB
    filler = fill(small_disk)
    with pytest.raises(SaveFailed) as refused:
        await session.close()
    message = refused.value.message
    assert DISK in message and str(session.run_dir) in message and "stays open" in message
    assert not session.closed
    assert sorted(p.name for p in session.run_dir.iterdir()) == ["run.jsonl"]  # nothing half-written
    # the files are still in the sandbox; with space back, closing again saves them
    assert (await session.exec("wc -c < data.bin")).stdout.strip() == "1048576"
    filler.unlink()
    run_dir = await session.close()
    assert session.closed and (run_dir / "workspace.tar").stat().st_size > 1024**2
    end = read_record(run_dir).events[-1]
    assert end.type == "run_end" and end.status == "ok" and "workspace.tar" in end.saved


async def test_an_open_on_a_full_disk_opens_nothing_and_leaves_no_folder(small_disk: Path) -> None:
    runs = small_disk / "runs"
    runs.mkdir()
    fill(small_disk)
    with pytest.raises(RunFolderUnavailable) as refused:
        await Session.open(model="offline", runs_dir=runs)
    assert DISK in refused.value.message and "no run folder was left" in refused.value.message
    assert refused.value.exit_code == 2
    assert list(runs.iterdir()) == []


def test_the_disk_s_words_come_from_one_place() -> None:
    """Every surface says a full disk in host_disk's words: the savers raise with them."""
    sources = {name: (Path(__file__).parents[2] / "src/coderoom" / name).read_text()
               for name in ("artifacts.py", "service/session.py")}
    for name, text in sources.items():
        assert "write_problem(" in text, name
        assert "No space left" not in text and "ENOSPC" not in text, name


async def test_at_shutdown_an_unsaved_session_closes_and_its_record_says_why(small_disk: Path) -> None:
    session = await Session.open(model="offline", runs_dir=small_disk / "runs")
    await session.run_python("open('data.bin', 'wb').write(bytes(range(256)) * 4096)")
    filler = fill(small_disk, leave=16 * 1024)  # room for run_end, not for the 1 MiB workspace
    with pytest.raises(SaveFailed, match="closed unsaved"):
        await session.close(keep_unsaved=False)  # what SessionManager.close_all does
    assert session.closed
    filler.unlink()
    end = read_record(session.run_dir).events[-1]
    assert end.type == "run_end" and end.status == "error" and DISK in (end.error or "")
    assert DISK in (end.incomplete or "") and end.saved == []


def test_an_archive_over_its_limit_is_a_refusal_not_a_disk_error(tmp_path: Path) -> None:
    """The completeness check (size on disk = bytes read) applies to an archive that was kept."""
    report = SaveReport()
    _write_and_extract(io.BytesIO(b"x" * (3 * 1024**2)), tmp_path, 1024**2, threading.Event(), report)
    assert "over the workspace_size limit" in report.refused["workspace.tar"] and report.incomplete is None
    assert list(tmp_path.iterdir()) == []
