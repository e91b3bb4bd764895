"""Attack pass R-D8: a node's run folder tar built to slip past the driver's exit
(`cluster.transfer.unpack_run_folder`): a sparse member far larger than its bytes in the tar, a
pax header renaming an innocent member out of the folder, a hard link, a hook, a setuid file."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

from coderoom.cluster.transfer import MAX_RUN_FOLDER_BYTES, unpack_run_folder
from coderoom.hostile.exits import LEFT_OUT_NOTE


def _octal(value: int, width: int) -> bytes:
    return b"%0*o" % (width - 1, value) + b"\0"


def gnu_sparse(name: str, real_size: int) -> bytes:
    """An old-GNU sparse member: 512 bytes stored, at the end of a file of `real_size` bytes."""
    info = tarfile.TarInfo(name)
    info.type, info.size = tarfile.GNUTYPE_SPARSE, 512
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT)[-512:])
    header[386:410] = _octal(real_size - 512, 12) + _octal(512, 12)  # one (offset, size) of the sparse map
    header[482] = 0  # no extended map
    header[483:495] = _octal(real_size, 12)
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header) + b"x" * 512 + b"\0" * 1024


def test_a_sparse_member_is_judged_by_the_size_it_would_take_not_its_bytes_in_the_tar(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    unpack_run_folder(gnu_sparse("output/sparse.bin", 1 << 40), run_dir)
    assert not (run_dir / "output/sparse.bin").exists()
    assert f"total size over {MAX_RUN_FOLDER_BYTES}" in (run_dir / LEFT_OUT_NOTE).read_text()


def test_pax_renames_links_hooks_and_setuid_bits_do_not_come_through(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, data: bytes = b"x", **attrs: object) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data) if attrs.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
            for key, value in attrs.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)

        add("output/ok.txt", b"ok")
        add("innocent", b"evil", pax_headers={"path": "../../paxescaped"})
        add("output/hard", type=tarfile.LNKTYPE, linkname="output/ok.txt")
        add(".git/hooks/post-checkout", mode=0o755)
        add("output/setuid", mode=0o4755)
    run_dir = tmp_path / "out" / "run"
    unpack_run_folder(buffer.getvalue(), run_dir)
    assert not (tmp_path / "paxescaped").exists() and not (tmp_path / "out" / "paxescaped").exists()
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")) == [
        LEFT_OUT_NOTE, "output", "output/ok.txt", "output/setuid"]
    assert not (run_dir / "output/setuid").stat().st_mode & (stat.S_ISUID | stat.S_IXUSR)
    note = (run_dir / LEFT_OUT_NOTE).read_text()
    assert "../../paxescaped" in note and "output/hard" in note and ".git/hooks/post-checkout" in note
