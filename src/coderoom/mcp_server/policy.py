"""Which host files an MCP client may copy into a session: those under `--allow-read` folders.

Why so strict: the client is another program (often a model) choosing paths on the server's
host. Each root is resolved once at start; a requested path is normalised lexically (no `..`
left), must lie under a root, and is opened from the root down with O_NOFOLLOW at every step
(`hostile.tree.open_beneath`): a symlink anywhere on the way, a special file, or a path outside
every root is refused, and the read stops at the size bound.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from ..errors import RequestRefused, UsageError
from ..hostile.tree import open_beneath


class ReadPolicy:
    def __init__(self, roots: Sequence[Path]) -> None:
        resolved = []
        for root in roots:
            path = Path(root).expanduser().resolve()
            if not path.is_dir():
                raise UsageError(f"--allow-read {root}: not a folder")
            resolved.append(path)
        self.roots = resolved

    def read(self, requested: str, max_bytes: int) -> bytes:
        """The bytes of host file `requested` (absolute, or relative to the first root)."""
        if not self.roots:
            raise RequestRefused("this server reads no host files (start it with --allow-read DIR)")
        if "\0" in requested:
            raise RequestRefused("a path with NUL")
        path = Path(os.path.normpath(self.roots[0] / requested))  # an absolute `requested` wins
        for root in self.roots:
            if path != root and path.is_relative_to(root):
                return _read_beneath(root, PurePosixPath(path.relative_to(root).as_posix()), requested, max_bytes)
        raise RequestRefused(f"{requested[:200]!r} is not under a folder this server may read (--allow-read)")


def _read_beneath(root: Path, rel: PurePosixPath, requested: str, max_bytes: int) -> bytes:
    try:
        fd = open_beneath(root, rel, os.O_RDONLY)
    except OSError as exc:
        raise RequestRefused(
            f"{requested[:200]!r}: cannot read it ({exc.strerror or exc}; links are not followed)"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise RequestRefused(f"{requested[:200]!r}: over the {max_bytes:,} byte limit for one file")
    return data
