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
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

BUSY = "another coderoom process is recovering it now"


@contextmanager
def held(folder: Path) -> Iterator[bool]:
    """Hold `folder` for the block: True when this process has it, False when another process
    does (then leave the workspace alone). A folder that cannot be opened (gone already) is
    nobody's to hold: True, and the caller meets the missing folder itself."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # the lock goes with the descriptor


@contextmanager
def all_held(folders: list[Path]) -> Iterator[bool]:
    """`held` for every one of `folders` at once: True only when this process has them all."""
    with ExitStack() as stack:
        yield all([stack.enter_context(held(folder)) for folder in folders])
