"""One recovery at a time per dead owner's workspace, and no removal while it runs.

Why: `serve`/`mcp` recover their runs at start and `coderoom sandbox prune` recovers and then
removes whatever is left, so two of them can meet on the same workspace. Without a mark, the
second one's prune removed a Docker container (or a local session folder) while the first was
still archiving it: the archive was killed and the workspace lost. The mark is a `flock` on the
workspace's host folder (a local session folder, a Docker binding folder): whoever holds it
recovers or removes that workspace; the others leave it alone. The kernel drops the lock when its
holder exits, killed or not, so a dead recoverer never blocks the next one. A recovery holds the
run folder it saves into as well, so nothing removes that folder under it (a dead Ray session
actor's runs folder, `cluster.node_folders`).

A failure to tell is never read as "nobody holds it" (attack R-F6): a process out of descriptors
(EMFILE), refused the folder (EACCES) or refused the lock cannot see another's mark, so `held`
raises `CannotTell` and the caller leaves the workspace alone, saying why. Only a folder that is
not there to hold (gone, or no folder: a link, a file) is nobody's.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

BUSY = "another coderoom process is recovering it now"
NOT_THERE = {errno.ENOENT, errno.ENOTDIR, errno.ELOOP}  # nothing a holder could have opened either


class CannotTell(Exception):
    """Whether another process holds the folder is unknown: leave it as if one did."""

    def __init__(self, folder: Path, cause: OSError) -> None:
        super().__init__(f"cannot tell whether another coderoom process is recovering it: {cause}")
        self.folder = folder


@contextmanager
def held(folder: Path) -> Iterator[bool]:
    """Hold `folder` for the block: True when this process has it, False when another process
    does (then leave the workspace alone). A folder that is not there to open (gone already, or
    a link or a file, which no holder can open either) is nobody's to hold: True, and the caller
    meets it itself. Any other failure to open or lock raises `CannotTell`, before the block."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno not in NOT_THERE:
            raise CannotTell(folder, exc) from exc
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        except OSError as exc:  # ENOLCK and the like: no answer either way
            raise CannotTell(folder, exc) from exc
        yield True
    finally:
        os.close(fd)  # the lock goes with the descriptor


@contextmanager
def all_held(folders: list[Path]) -> Iterator[bool]:
    """`held` for every one of `folders` at once: True only when this process has them all."""
    with ExitStack() as stack:
        yield all([stack.enter_context(held(folder)) for folder in folders])
