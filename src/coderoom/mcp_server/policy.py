"""Which host files an MCP client may copy into a session: those under `--allow-read` folders.

Why so strict: the client is another program (often a model) choosing paths on the server's
host. Each root is opened once at start and held as a directory fd for the server's life
(SVC-M1: re-opening it by path on every read let whoever may write a folder *above* a root swap
that folder for a symlink and move the root). A requested path is normalised lexically (no `..`
left), must lie under a root's name, and is opened beneath the root's fd with O_NOFOLLOW at
every step (`hostile.tree.open_beneath`): a symlink anywhere on the way, a special file, or a
path outside every root is refused, and the read stops at the size bound.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType

from ..errors import RequestRefused, UsageError
from ..hostile.tree import open_beneath

_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True)
class _Root:
    name: Path  # resolved at start: only for matching requested paths, never opened again
    fd: int  # the folder itself, as it was at start: every read walks down from here


class ReadPolicy:
    """The allowed roots, held open until `close()` (the server's shutdown)."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self._roots: list[_Root] = []
        try:
            for root in roots:
                self._roots.append(_open_root(Path(root).expanduser()))
        except BaseException:
            self.close()
            raise

    def read(self, requested: str, max_bytes: int) -> bytes:
        """The bytes of host file `requested` (absolute, or relative to the first root)."""
        if not self._roots:
            raise RequestRefused("this server reads no host files (start it with --allow-read DIR)")
        if "\0" in requested:
            raise RequestRefused("a path with NUL")
        path = Path(os.path.normpath(self._roots[0].name / requested))  # an absolute `requested` wins
        for root in self._roots:
            if path != root.name and path.is_relative_to(root.name):
                rel = PurePosixPath(path.relative_to(root.name).as_posix())
                return _read_beneath(root.fd, rel, requested, max_bytes)
        raise RequestRefused(f"{requested[:200]!r} is not under a folder this server may read (--allow-read)")

    def close(self) -> None:
        roots, self._roots = self._roots, []
        for root in roots:
            os.close(root.fd)

    def __enter__(self) -> ReadPolicy:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _open_root(given: Path) -> _Root:
    """Open `given` (links followed: the folder the user named, as it is now) and name it by its
    resolved path; a folder moved between the two steps is refused, so the name and fd agree."""
    try:
        fd = os.open(given, _ROOT_FLAGS)
    except OSError as exc:
        raise UsageError(f"--allow-read {given}: not a folder ({exc.strerror or exc})") from None
    try:
        name = given.resolve()
        opened, named = os.fstat(fd), os.stat(name)
    except OSError as exc:
        os.close(fd)
        raise UsageError(f"--allow-read {given}: moved while the server started ({exc.strerror or exc})") from None
    if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
        os.close(fd)
        raise UsageError(f"--allow-read {given}: moved while the server started")
    return _Root(name, fd)


def _read_beneath(root_fd: int, rel: PurePosixPath, requested: str, max_bytes: int) -> bytes:
    try:
        fd = open_beneath(root_fd, rel, os.O_RDONLY)
    except OSError as exc:
        raise RequestRefused(
            f"{requested[:200]!r}: cannot read it ({exc.strerror or exc}; links are not followed)"
        ) from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise RequestRefused(f"{requested[:200]!r}: over the {max_bytes:,} byte limit for one file")
    return data
