"""The exact versions a Docker derived image says it installed, read on the host with bounds.

Why hostile: the list is written inside the image's build, where pip ran whatever a package's
build ran (an sdist's setup.py), so its content is the build's, not ours. It is only parsed:
at most MAX_LOCK_BYTES of JSON, at most MAX_LOCKED entries, each a [name, version] pair of
plain short strings (a name as pip normalises it, a version of PEP 440's characters); anything
else refuses the whole list (ValueError), which the run record then says instead of versions.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Iterable

MAX_LOCK_BYTES = 256 * 1024
MAX_LOCKED = 2000
_TAR_OVERHEAD = 64 * 1024  # of the one-file tar the engine sends around the list
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")
_VERSION = re.compile(r"[A-Za-z0-9.+!_-]{1,64}")


def lock_from_archive(chunks: Iterable[bytes]) -> tuple[tuple[str, str], ...]:
    """The pairs of the list in the one-file tar `chunks` (Docker's archive of a path), read
    no further than the list's bound allows; ValueError naming what is wrong."""
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > MAX_LOCK_BYTES + _TAR_OVERHEAD:
            raise ValueError(f"the image's package list is over {MAX_LOCK_BYTES} bytes")
    try:
        with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
            member = tar.next()
            if member is None or not member.isfile() or member.size > MAX_LOCK_BYTES:
                raise ValueError("the image's package list is not a file within its size limit")
            handle = tar.extractfile(member)
            return parse_lock(handle.read(MAX_LOCK_BYTES + 1) if handle is not None else b"")
    except tarfile.TarError:
        raise ValueError("the image's package list came in an archive that does not read") from None


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
