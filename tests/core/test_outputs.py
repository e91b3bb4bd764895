"""Outputs: extraction treats the workspace archive as hostile; checks say exactly what is wrong."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from coderoom.hostile.archive import safe_extract_tar
from coderoom.hostile.names import UnsafePath, safe_relative_path
from coderoom.outputs import check_output


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    buffer.seek(0)
    return buffer


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


@pytest.mark.parametrize("name", ["/etc/passwd", "../x", "a/../../b", "", "a\x00b", "."])
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(UnsafePath):
        safe_relative_path(name)


def test_regular_files_and_dirs_are_extracted(tmp_path: Path) -> None:
    report = safe_extract_tar(_tar([_file("output/a.csv", b"h\n1\n"), _file("b.txt")]), tmp_path)
    assert sorted(report.extracted) == ["b.txt", "output/a.csv"]
    assert (tmp_path / "output/a.csv").read_bytes() == b"h\n1\n"


def test_traversal_links_and_devices_are_refused_and_nothing_escapes(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    outside = tmp_path / "outside.txt"
    outside.write_text("host")
    device = tarfile.TarInfo("dev")
    device.type = tarfile.CHRTYPE
    fifo = tarfile.TarInfo("fifo")
    fifo.type = tarfile.FIFOTYPE
    archive = _tar(
        [
            _file("../outside.txt", b"pwned"),
            _file(str(outside), b"pwned"),
            _link("link", str(outside)),
            _link("hard", str(outside), tarfile.LNKTYPE),
            (device, None),
            (fifo, None),
        ]
    )
    report = safe_extract_tar(archive, dest)
    assert report.extracted == []
    assert len(report.refused) == 6
    assert outside.read_text() == "host"
    assert list(dest.iterdir()) == []


def test_a_symlink_already_in_the_destination_is_not_followed(tmp_path: Path) -> None:
    dest, elsewhere = tmp_path / "dest", tmp_path / "elsewhere"
    dest.mkdir()
    elsewhere.mkdir()
    (dest / "output").symlink_to(elsewhere)
    (dest / "f.txt").symlink_to(tmp_path / "victim.txt")
    (tmp_path / "victim.txt").write_text("host")
    report = safe_extract_tar(_tar([_file("output/a.csv"), _file("f.txt", b"new")]), dest)
    assert list(elsewhere.iterdir()) == []
    assert (tmp_path / "victim.txt").read_text() == "host"
    assert ("output/a.csv", report.refused[0][1]) in report.refused
    assert (dest / "f.txt").read_bytes() == b"new" and not (dest / "f.txt").is_symlink()


def test_count_and_size_are_bounded(tmp_path: Path) -> None:
    many = _tar([_file(f"f{i}") for i in range(5)])
    assert len(safe_extract_tar(many, tmp_path / "a", max_files=3).extracted) == 3
    big = _tar([_file("big", b"x" * 100), _file("small", b"y")])
    report = safe_extract_tar(big, tmp_path / "b", max_bytes=50)
    assert report.extracted == ["small"]


def test_members_filter_selects_files_and_folders(tmp_path: Path) -> None:
    archive = _tar([_file("output/a.csv"), _file("output/sub/b.md"), _file("input/x.csv")])
    report = safe_extract_tar(archive, tmp_path, members=["output"])
    assert sorted(report.extracted) == ["output/a.csv", "output/sub/b.md"]


@pytest.mark.parametrize(
    ("path", "data", "ok", "says"),
    [
        ("o.csv", None, False, "missing"),
        ("o.csv", b"a,b\n1,2\n", True, "1 rows"),
        ("o.csv", b"a,b\n", False, "no data rows"),
        ("o.csv", b"a,b\n1,2,3\n", False, "columns"),
        ("o.md", b"# Report\n", True, "lines"),
        ("o.md", b"  \n", False, "empty"),
        ("o.md", b"\xff\xfe", False, "UTF-8"),
        ("o.json", b"{\"a\": 1}", True, "dict"),
        ("o.json", b"{oops", False, "does not parse"),
        ("o.png", b"\x89PNG\r\n\x1a\nnot really", False, "does not decode"),
    ],
)
def test_checks_by_type(path: str, data: bytes | None, ok: bool, says: str) -> None:
    result = check_output(path, data)
    assert result.ok is ok
    assert says in result.detail


def test_a_real_png_decodes() -> None:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (4, 3)).save(buffer, format="PNG")
    assert check_output("p.png", buffer.getvalue()).detail == "png: 4x3"


def test_empty_csv_allowed_when_the_job_says_so() -> None:
    assert check_output("o.csv", b"a,b\n", allow_empty=True).ok
