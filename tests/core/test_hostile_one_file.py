"""A file read from a container through Docker's archive API (the image's trust roots, a derived
image's package list) comes as a tar the engine streams; what is in it is the container's. One
reader, `hostile.archive.one_file`, takes only one regular file within a bound from it, and
every caller goes through it."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from coderoom.hostile.archive import ArchiveError, one_file
from coderoom.hostile.package_lock import lock_from_archive
from coderoom.sandboxes.docker.roots import image_roots

LIMIT = 1024


def _tar(*members: tuple[str, bytes, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.linkname = "/etc/shadow" if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE) else ""
                tar.addfile(info)
    return out.getvalue()


def _chunks(data: bytes, size: int = 512) -> Iterator[bytes]:
    return (data[at : at + size] for at in range(0, len(data), size))


def test_the_one_regular_file_is_returned_whole() -> None:
    assert one_file(_chunks(_tar(("roots.pem", tarfile.REGTYPE, b"x" * LIMIT))), LIMIT) == b"x" * LIMIT


def test_a_stream_past_the_bound_is_not_read_further() -> None:
    read = []

    def endless() -> Iterator[bytes]:
        while True:
            read.append(65536)
            yield b"\0" * 65536

    with pytest.raises(ArchiveError, match="over 1024 bytes: not read further"):
        one_file(endless(), LIMIT)
    assert sum(read) <= LIMIT + 64 * 1024 + 65536  # the bound, its tar slack, one chunk


@pytest.mark.parametrize(
    "members",
    [(), (("a", tarfile.REGTYPE, b"1"), ("b", tarfile.REGTYPE, b"2")), (("d", tarfile.DIRTYPE, b""),)],
    ids=["empty", "two-files", "a-directory-only"],
)
def test_anything_but_exactly_one_member_is_refused(members: tuple[tuple[str, bytes, bytes], ...]) -> None:
    with pytest.raises(ArchiveError):
        one_file([_tar(*members)], LIMIT)


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_a_link_or_device_member_is_refused(kind: bytes) -> None:
    with pytest.raises(ArchiveError, match="not a regular file"):
        one_file([_tar(("roots.pem", kind, b""))], LIMIT)


def test_a_member_larger_than_the_bound_is_refused_though_the_stream_fits_the_slack() -> None:
    archive = _tar(("roots.pem", tarfile.REGTYPE, b"x" * (LIMIT + 1)))
    assert len(archive) <= LIMIT + 64 * 1024  # the stream alone would pass
    with pytest.raises(ArchiveError, match="over 1024 bytes"):
        one_file([archive], LIMIT)


@pytest.mark.parametrize("data", [b"not a tar", b"\x1f\x8b" + b"\0" * 600], ids=["garbage", "gzip"])
def test_an_archive_that_does_not_read_is_refused(data: bytes) -> None:
    with pytest.raises(ArchiveError, match="does not read"):
        one_file([data], LIMIT)


def test_a_member_cut_short_is_refused() -> None:
    archive = _tar(("roots.pem", tarfile.REGTYPE, b"x" * 900))
    with pytest.raises(ArchiveError):
        one_file([archive[: 512 + 300]], LIMIT)


def _engine(archive: bytes) -> SimpleNamespace:
    """The one call of the engine's API the roots reader makes, answering with `archive`."""
    return SimpleNamespace(api=SimpleNamespace(get_archive=lambda _id, _path: (_chunks(archive), {})))


def test_every_caller_refuses_what_one_file_refuses() -> None:
    device = _tar(("x", tarfile.CHRTYPE, b""))
    assert image_roots(_engine(device), "c") is None
    with pytest.raises(ValueError, match="the image's package list: its one member is not a regular file"):
        lock_from_archive(_chunks(device))
    listed = json.dumps([["crtiny", "1.2.3"]]).encode()
    assert image_roots(_engine(_tar(("ca.pem", tarfile.REGTYPE, b"PEM"))), "c") == b"PEM"
    assert lock_from_archive(_chunks(_tar(("l", tarfile.REGTYPE, listed)))) == (("crtiny", "1.2.3"),)
