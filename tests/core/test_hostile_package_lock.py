"""The package list a Docker derived image's build wrote is the build's (an sdist's setup.py may
have written it): the host parses it with bounds and takes only plain [name, version] pairs."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from coderoom.hostile.package_lock import MAX_LOCK_BYTES, MAX_LOCKED, lock_from_archive, parse_lock


def test_a_list_of_pairs_is_read_sorted_with_names_normalised_as_pip_does() -> None:
    data = json.dumps([["Zeta_Pkg", "1.0"], ["alpha.pkg", "2.0rc1+local"]]).encode()
    assert parse_lock(data) == (("alpha-pkg", "2.0rc1+local"), ("zeta-pkg", "1.0"))


@pytest.mark.parametrize(
    "data",
    [
        b"x" * (MAX_LOCK_BYTES + 1),
        json.dumps([["a", "1"]] * (MAX_LOCKED + 1)).encode(),
        b"\xff[]",
        b'{"a": "1"}',
        json.dumps([["a", "1", "extra"]]).encode(),
        json.dumps([["a", 1]]).encode(),
        json.dumps([["../../etc/passwd", "1"]]).encode(),
        json.dumps([["a", "1\u001b[2J"]]).encode(),
        json.dumps([["a", "1" * 65]]).encode(),
        json.dumps([["a b", "1"]]).encode(),
    ],
    ids=["too-large", "too-many", "not-ascii", "not-a-list", "not-a-pair", "not-strings", "a-path",
         "escape-in-version", "long-version", "space-in-name"],  # fmt: skip
)
def test_anything_else_refuses_the_whole_list(data: bytes) -> None:
    with pytest.raises(ValueError, match="the image's package list"):
        parse_lock(data)


def _tar(name: str, data: bytes, kind: bytes = tarfile.REGTYPE) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.type = (len(data), kind) if kind == tarfile.REGTYPE else (0, kind)
        tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return out.getvalue()


def test_the_engine_s_archive_of_the_list_is_read_within_bounds() -> None:
    listed = json.dumps([["crtiny", "1.2.3"]]).encode()
    assert lock_from_archive([_tar("packages-lock.json", listed)]) == (("crtiny", "1.2.3"),)
    with pytest.raises(ValueError, match="not a regular file"):
        lock_from_archive([_tar("packages-lock.json", b"", tarfile.SYMTYPE)])
    with pytest.raises(ValueError, match="over"):
        lock_from_archive(iter(lambda: b"\0" * 65536, None))  # endless: read no further than the bound
    with pytest.raises(ValueError, match="does not read"):
        lock_from_archive([b"not a tar"])
