"""The package list a Docker derived image's build wrote is the build's (an sdist's setup.py may
have written it): the host parses it with bounds and takes only plain [name, version] pairs."""

from __future__ import annotations

import json

import pytest

from coderoom.hostile.package_lock import MAX_LOCK_BYTES, MAX_LOCKED, parse_lock


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
