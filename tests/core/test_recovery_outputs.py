"""A save cut between workspace.tar's rename into place and output/'s publication (a kill -9 of
the owner in that moment): recovery keeps the whole archive, extracts output/ from it through the
exit policy as the save would have, and removes the cut extraction's staging folder."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from coderoom.artifacts import SaveReport
from coderoom.recovery import _saved_before


def _archive(files: dict[str, bytes]) -> bytes:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return data.getvalue()


def test_output_is_extracted_from_the_whole_archive_a_kill_left_behind(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    files = {"output/k.txt": b"kept", "output/.git/config": b"[core]\n", "made.txt": b"in the archive only"}
    (run_dir / "workspace.tar").write_bytes(_archive(files))
    cut = run_dir / ".output-x1y2.partial"
    cut.mkdir()
    (cut / "half.txt").write_bytes(b"from the cut extraction")

    report = SaveReport()
    assert _saved_before(run_dir, report, 10**6)

    assert (run_dir / "output" / "k.txt").read_bytes() == b"kept"
    assert not (run_dir / "output" / ".git").exists()  # the exit policy, as in a save
    assert not (run_dir / "made.txt").exists()
    assert report.saved[0] == "workspace.tar" and "output/k.txt" in report.saved
    assert not cut.exists()


def test_an_output_folder_already_published_is_listed_not_extracted_again(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "output").mkdir(parents=True)
    (run_dir / "output" / "k.txt").write_bytes(b"published by the owner")
    (run_dir / "workspace.tar").write_bytes(_archive({"output/k.txt": b"in the archive"}))

    report = SaveReport()
    assert _saved_before(run_dir, report, 10**6)
    assert (run_dir / "output" / "k.txt").read_bytes() == b"published by the owner"
    assert report.saved == ["workspace.tar", "output/k.txt"]
