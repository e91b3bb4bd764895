"""The exact versions a Docker derived image says it installed, read on the host with bounds.

Why hostile: the list is written inside the image's build, where pip ran whatever a package's
build ran (an sdist's setup.py), so its content is the build's, not ours. It is only parsed:
at most MAX_LOCK_BYTES of JSON, at most MAX_LOCKED entries, each a [name, version] pair of
plain short strings (a name as pip normalises it, a version of PEP 440's characters); anything
else refuses the whole list (ValueError), which the run record then says instead of versions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from .archive import ArchiveError, one_file

MAX_LOCK_BYTES = 256 * 1024
MAX_LOCKED = 2000
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9.+!_-]{1,64}")


def lock_from_archive(chunks: Iterable[bytes]) -> tuple[tuple[str, str], ...]:
    """The pairs of the list in the one-file tar `chunks` (Docker's archive of a path), read
    with `archive.one_file`'s bounds; ValueError naming what is wrong."""
    try:
        data = one_file(chunks, MAX_LOCK_BYTES)
    except ArchiveError as exc:
        raise ValueError(f"the image's package list: {exc}") from None
    return parse_lock(data)


def parse_lock(data: bytes) -> tuple[tuple[str, str], ...]:
    """(name, version) pairs, sorted, from the image's lock file; ValueError naming what is wrong."""
    if len(data) > MAX_LOCK_BYTES:
        raise ValueError(f"the image's package list is over {MAX_LOCK_BYTES} bytes")
    try:
        items = json.loads(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("the image's package list is not ASCII JSON") from None
    if not isinstance(items, list) or len(items) > MAX_LOCKED:
        raise ValueError(f"the image's package list is not a list of at most {MAX_LOCKED} entries")
    pairs = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(part, str) for part in item)):
            raise ValueError("an entry of the image's package list is not a [name, version] pair")
        name, version = item
        if not (_NAME.fullmatch(name) and _VERSION.fullmatch(version)):
            raise ValueError("an entry of the image's package list is not a package name and version")
        pairs.append((re.sub(r"[-_.]+", "-", name).lower(), version))  # PEP 503, as the local backend's
    return tuple(sorted(set(pairs)))
