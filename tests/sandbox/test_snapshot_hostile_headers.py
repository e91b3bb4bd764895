"""Snapshot headers the attack pass (sandbox pass issue 12) used to make the host read hundreds
of MiB into memory or spend minutes, turned into tests of `hostile.snapshot` (shared by both
backends: the host checks every snapshot before either restores it)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from coderoom.hostile import snapshot as hs
from coderoom.hostile import tree

B = tarfile.BLOCKSIZE


def _header(name: str, size: int, kind: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _record(keyword: str, value: object) -> bytes:
    body = f" {keyword}={value}\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n += 1
    return f"{n}{body}".encode()


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % B)


def _refusal(data: bytes, **kwargs: int) -> str:
    with pytest.raises(hs.SnapshotRefused) as refused:
        hs.check(io.BytesIO(data), max_bytes=kwargs.pop("max_bytes", 1 << 30), **kwargs)
    return refused.value.reason


@pytest.mark.parametrize("kind", [b"X", b"V", b"Z"])
def test_a_metadata_header_over_the_bound_is_refused_whatever_its_type(kind: bytes) -> None:
    """AP-S1: Solaris `X` (read whole by tarfile as PAX) and any other non-file type with data."""
    size = hs.MAX_HEADER_DATA + 1
    data = _header("././@Header", size, kind) + _padded(b"1" * size) + _header("a.txt", 0, tarfile.REGTYPE) + bytes(2 * B)
    assert "metadata header" in _refusal(data)


def test_a_pax_header_repeating_size_is_refused() -> None:
    """AP-S1b: "size=N, size=0": the scan and tarfile must not disagree on where headers are."""
    hidden = _header("././@LongLink", hs.MAX_HEADER_DATA + 1, tarfile.GNUTYPE_LONGNAME) + _padded(b"a" * (hs.MAX_HEADER_DATA + 1))
    pax = _record("size", len(hidden)) + _record("size", 0)
    data = _header("././@PaxHeader", len(pax), tarfile.XHDTYPE) + _padded(pax) + _header("first.txt", 0, tarfile.REGTYPE)
    data += hidden + _header("second.txt", 0, tarfile.REGTYPE) + bytes(2 * B)
    assert "repeated" in _refusal(data)


@pytest.mark.parametrize("pax", [b"99 size=0\n", b"8 size=0\ngarbage", b"7 size=0\n", b"20 GNU.sparse.major=1\n"])
def test_an_ill_formed_or_sparse_pax_header_is_refused(pax: bytes) -> None:
    data = _header("././@PaxHeader", len(pax), tarfile.XHDTYPE) + _padded(pax) + _header("a.txt", 0, tarfile.REGTYPE) + bytes(2 * B)
    assert "PAX header" in _refusal(data)


def test_a_well_formed_pax_size_is_read_as_tarfile_reads_it() -> None:
    body = b"hello"
    pax = _record("size", len(body)) + _record("path", "named.txt")
    data = _header("././@PaxHeader", len(pax), tarfile.XHDTYPE) + _padded(pax) + _header("x", 0, tarfile.REGTYPE)
    checked = hs.check(io.BytesIO(data + _padded(body) + bytes(2 * B)), max_bytes=100)
    try:
        assert [(str(m.rel), m.size) for m in checked.members] == [("named.txt", 5)]
        assert checked.data(checked.members[0]).read() == body
    finally:
        checked.close()


def test_a_snapshot_file_read_in_place_is_bounded_too(tmp_path: Path) -> None:
    """AP-S1: a seekable snapshot is read in place, never copied; its length has the same bound."""
    path = tmp_path / "big.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("a.bin")
        info.size = 256 * 1024
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    with open(path, "rb") as source, pytest.raises(hs.SnapshotRefused, match="over"):
        hs.check(source, max_bytes=1024, max_members=1)


def _deep(n: int, depth: int) -> io.BytesIO:
    out = io.BytesIO()
    deep = "/".join(["d"] * depth)
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(n):
            tar.addfile(tarfile.TarInfo(f"{deep}/{i}"), io.BytesIO(b""))
    out.seek(0)
    return out


def test_path_components_in_all_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """AP-S2: checking and restoring cost the names' depths summed; MAX_PATH_COMPONENTS bounds it."""
    monkeypatch.setattr(hs, "MAX_PATH_COMPONENTS", 250 * 10)
    with pytest.raises(hs.SnapshotRefused, match="MAX_PATH_COMPONENTS"):
        hs.check(_deep(10, 250), max_bytes=1 << 20)
    hs.check(_deep(9, 250), max_bytes=1 << 20).close()


def test_restoring_many_deep_files_opens_each_directory_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AP-S2: 300 files 250 levels deep were 300 walks from the root (75,000 opens); now the
    shared directories stay open."""
    opened = []
    real = tree.open_dir_beneath

    def counting(root, parts, **kwargs):  # type: ignore[no-untyped-def]
        parts = list(parts)
        opened.append(len(parts))
        return real(root, parts, **kwargs)

    monkeypatch.setattr(hs, "open_dir_beneath", counting)
    checked = hs.check(_deep(300, 250), max_bytes=1 << 20)
    try:
        hs.restore(checked, tmp_path, owner=None)
    finally:
        checked.close()
    assert sum(opened) <= 250
    assert len(list((tmp_path / "/".join(["d"] * 250)).iterdir())) == 300
