"""`prune` and session close run as root over folders uid 65534 can write: the attacks of issue
19, with real processes. A uid-65534 host process races root's removal with links; a forged
folder names another live session's cgroup; a hostile folder tries to stop `prune` for every
folder after it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coderoom.hostile import tree

SANDBOX_UID = 65534  # bwrap's host uid when coderoom runs as root (`bwrap.host_id`)
RACE_S = 4.0  # removals of a tree a racer keeps turning into links
RACE_MIN_REMOVALS = 200


def _as_sandbox_uid() -> None:
    os.setgroups([])
    os.setgid(SANDBOX_UID)
    os.setuid(SANDBOX_UID)


@contextlib.contextmanager
def _forked(body_as_sandbox_uid: object) -> Iterator[int]:
    """Run `body_as_sandbox_uid()` in a forked child as uid 65534 until the block ends (SIGKILL by pid)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            _as_sandbox_uid()
            body_as_sandbox_uid()  # type: ignore[operator]
        finally:
            os._exit(0)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder in /tmp that uid 65534 can reach, with a root-owned canary file and directory."""
    if os.geteuid() != 0:
        pytest.skip("the attack is on root's removal; needs root to drop to uid 65534")
    base = Path(tempfile.mkdtemp(prefix="coderoom-prune-test-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        tree.remove_tree(base)


_RENAME_EXCHANGE = 2


def _exchange(libc: ctypes.CDLL, first: bytes, second: bytes) -> None:
    """renameat2(RENAME_EXCHANGE): the two names swap at once; each always names something."""
    libc.renameat2(_AT_FDCWD, first, _AT_FDCWD, second, _RENAME_EXCHANGE)


_AT_FDCWD = -100


def _swap_forever(arena: Path, canaries: tuple[Path, Path]) -> None:
    """As uid 65534: keep a tree at `arena/tree` whose folders swap places with links to root's
    canaries as fast as the kernel allows, so a check-then-chmod by name lands on a canary."""
    libc = ctypes.CDLL(None, use_errno=True)
    os.chdir(arena)
    pairs = [(f"tree/d{index}".encode(), f"tree/l{index}".encode()) for index in range(2)]
    while True:
        with contextlib.suppress(OSError):
            os.mkdir("tree", 0o755)
        for (folder, link), canary in zip(pairs, canaries):
            with contextlib.suppress(OSError):
                os.mkdir(folder, 0o555)  # read-only: the remover must chmod it
            with contextlib.suppress(OSError):
                os.symlink(canary, link)
        for _ in range(200):
            for folder, link in pairs:
                _exchange(libc, folder, link)


def test_a_racing_uid_65534_process_never_makes_root_chmod_through_a_link(shared_tmp: Path) -> None:
    """Attack 19a: remove_tree checked an entry without following links, then chmod-ed it by
    name, which follows: a uid-65534 process swapping a folder for a link between the two made
    root chmod any path (a root-owned canary became 0700 after 8 prunes). Removal now acts only
    through O_NOFOLLOW fds; the canaries keep their modes however the race falls."""
    canary_file, canary_dir = shared_tmp / "canary-file", shared_tmp / "canary-dir"
    canary_file.write_text("root's")
    canary_file.chmod(0o644)
    canary_dir.mkdir(mode=0o755)
    canary_dir.chmod(0o755)
    arena = shared_tmp / "arena"
    arena.mkdir()
    os.chown(arena, SANDBOX_UID, SANDBOX_UID)
    removals = refused = 0
    with _forked(lambda: _swap_forever(arena, (canary_file, canary_dir))):
        end = time.monotonic() + RACE_S
        while time.monotonic() < end or removals < RACE_MIN_REMOVALS:
            if not (arena / "tree").exists():
                time.sleep(0.001)
                continue
            try:
                tree.remove_tree(arena / "tree")
            except OSError:  # the tree kept changing: refused, never followed
                refused += 1
            removals += 1
            assert stat.S_IMODE(canary_file.stat().st_mode) == 0o644, f"canary file chmod-ed after {removals} removals"
            assert stat.S_IMODE(canary_dir.stat().st_mode) == 0o755, f"canary dir chmod-ed after {removals} removals"
    assert canary_file.read_text() == "root's"
    assert refused < removals, "every removal was refused: the race was not run"
