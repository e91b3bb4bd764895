"""Outputs: extraction treats the workspace archive as hostile; checks say exactly what is wrong,
and a file built to exhaust its parser is refused with the limit it broke."""

from __future__ import annotations

import ast
import io
import json
import struct
import sys
import tarfile
import zlib
from pathlib import Path

import pytest
from PIL import Image

from coderoom.hostile.archive import safe_extract_tar
from coderoom.hostile.names import UnsafePath, safe_relative_path
from coderoom.jobs import OutputSpec
from coderoom.outputs import OutputCheck, check_on_host, max_reply, parse_reply


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


def check_bytes(name: str, data: bytes | None, tmp_path: Path, *, allow_empty: bool = False) -> OutputCheck:
    """Write `data` as output/NAME and check it the way a run does after extraction."""
    spec = OutputSpec(path=f"output/{name}", allow_empty=allow_empty)
    if data is not None:
        (tmp_path / "output").mkdir(exist_ok=True)
        (tmp_path / spec.path).write_bytes(data)
    (check,) = check_on_host(tmp_path, [spec])
    return check


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("path", "data", "ok", "says"),
    [
        ("o.csv", None, False, "missing"),
        ("o.csv", b"a,b\n1,2\n", True, "1 rows"),
        ("o.csv", b"a,b\n", False, "no data rows"),
        ("o.csv", b"a,b\n1,2,3\n", False, "columns"),
        ("o.csv", b"a,b\n\xff,1\n", False, "UTF-8"),
        ("o.csv", b"a\n" + b"x" * (1024**2 + 10) + b"\n", False, "line limit"),
        ("o.md", b"# Report\n", True, "lines"),
        ("o.md", b"  \n", False, "empty"),
        ("o.md", b"\xff\xfe", False, "UTF-8"),
        ("o.json", b"{\"a\": 1}", True, "dict"),
        ("o.json", b"{oops", False, "does not parse"),
        ("o.json", b"[" * 100_000 + b"]" * 100_000, False, "does not parse"),
        ("o.png", b"\x89PNG\r\n\x1a\nnot really", False, "does not decode"),
        ("o.jpg", b"GIF89a", False, "neither PNG nor JPEG"),
        ("o.bin", b"\x00\x01", True, "2 bytes"),
        ("o.bin", b"", False, "empty file"),
    ],
)
def test_checks_by_type(path: str, data: bytes | None, ok: bool, says: str, tmp_path: Path) -> None:
    result = check_bytes(path, data, tmp_path)
    assert result.ok is ok
    assert says in result.detail


@pytest.mark.parametrize("mode", ["1", "L", "P", "LA", "RGB", "RGBA", "I;16"])
def test_real_pngs_of_every_depth_decode(mode: str, tmp_path: Path) -> None:
    """The checker inflates the image data and counts it against IHDR: odd widths test the
    rounding of bit depths below 8 bits."""
    data = png_bytes(Image.new(mode, (7, 3)))
    assert check_bytes("p.png", data, tmp_path).detail == "png: 7x3"


def test_a_cut_or_corrupted_png_does_not_decode(tmp_path: Path) -> None:
    data = png_bytes(Image.effect_noise((64, 64), 50).convert("RGB"))
    assert "does not decode" in check_bytes("cut.png", data[: len(data) // 2], tmp_path).detail
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    assert "does not decode" in check_bytes("bad.png", bytes(flipped), tmp_path).detail


def test_a_real_jpeg_is_read_by_its_markers(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (40, 30), "red").save(buffer, format="JPEG")
    assert check_bytes("p.jpg", buffer.getvalue(), tmp_path).detail == "jpeg: 40x30"
    assert "cut short" in check_bytes("q.jpg", buffer.getvalue()[:-2], tmp_path).detail


def png_bomb(width: int, height: int, rows: int = 64) -> bytes:
    """A greyscale PNG whose IHDR says `width`x`height`, written with zlib: a decoder allocates
    width*height bytes from the header alone; the first `rows` rows of zero pixels keep it at a
    few KB (a complete 30000x30000 image would still be under 1 MB)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    data = zlib.compress(b"\x00" * (1 + width) * rows, 9)
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def test_a_png_bomb_is_refused_before_it_is_inflated(tmp_path: Path) -> None:
    bomb = png_bomb(30000, 30000)
    assert len(bomb) < 8 * 1024
    check = check_bytes("bomb.png", bomb, tmp_path)
    assert not check.ok
    assert "30000x30000 (900 megapixels): over the 64 megapixel limit" in check.detail


def test_a_forged_checker_reply_is_bounded_and_shown_only_as_plain_text() -> None:
    specs = [OutputSpec(path="output/a.csv"), OutputSpec(path="output/b.csv")]
    markup = json.dumps([{"ok": True, "detail": "[red]\x1b]52;c;cHduZWQ=\x07", "size": 1}, {"ok": True, "detail": "fine", "size": 2}])
    checks = parse_reply(specs, markup.encode())
    assert [c.detail for c in checks] == ["(detail withheld: not plain text)", "fine"]
    assert {c.detail for c in parse_reply(specs, b"[" + b" " * 10**6 + b"]")} == {
        f"not checked: the checker's reply is over {max_reply(specs)} bytes"
    }
    one = json.dumps([{"ok": True, "detail": "x", "size": 1}]).encode()
    assert not any(c.ok for c in parse_reply(specs, one))
    assert not any(c.ok for c in parse_reply(specs, b'[{"ok": 1, "detail": "x", "size": 1}] * 2'))


def test_the_checker_uses_only_the_standard_library() -> None:
    """It runs inside sandboxes, whose Python has nothing else."""
    from importlib.resources import files

    tree = ast.parse(files("coderoom.inside").joinpath("check_outputs.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_empty_csv_allowed_when_the_job_says_so(tmp_path: Path) -> None:
    assert check_bytes("o.csv", b"a,b\n", tmp_path, allow_empty=True).ok
