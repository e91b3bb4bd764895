"""Ray warm pool, placement and deadlines attack pass (docs/security.md, R-E): `coderoom sandbox
prune` on a node (`cluster.node_folders.prune`) removes the temporary runs folder of a session
actor that died, and nothing else a local user or a forged lease puts in the node's temp dir:
not a link posing as a folder (nor what it points to), not another user's folder, not a folder
others may write, not a live owner's, nor one whose owner is in another PID namespace; and in a
dead actor's folder it removes links, never what they point to.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from coderoom.cluster import node_folders
from coderoom.sandboxes import records
from coderoom.sandboxes.leases import LEASE_FILE, Owner, pid_namespace, write_lease

CANARY = "canary-r4-prune-7d1f"


@pytest.fixture
def node_tmp(tmp_path: Path) -> Iterator[Path]:
    """The node's temp dir, sticky and world-writable as /tmp is."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    folder.chmod(0o1777)
    previous = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = previous


def dead_owner() -> Owner:
    me = Owner.me()
    return Owner(me.boot, me.pid, me.start + 1, pid_namespace())  # our pid, another start: a process gone


def leased(folder: Path, owner: Owner) -> Path:
    folder.mkdir(mode=0o700)
    records.write(folder, LEASE_FILE, json.dumps(owner.__dict__).encode())
    return folder


def test_prune_removes_a_dead_actors_folder_and_nothing_a_forger_placed_beside_it(node_tmp: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.txt").write_text(CANARY)
    leased(outside / "victim", dead_owner())  # a dead lease, outside the temp dir

    dead = leased(node_tmp / f"{node_folders.PREFIX}dead", dead_owner())
    (dead / "run").mkdir()
    (dead / "run" / "escape").symlink_to(outside)  # a link inside a dead actor's folder
    link = node_tmp / f"{node_folders.PREFIX}link"
    link.symlink_to(outside / "victim")  # a link posing as an actor's folder
    foreign = leased(node_tmp / f"{node_folders.PREFIX}foreign", dead_owner())
    os.chown(foreign / LEASE_FILE, 65534, 65534)
    os.chown(foreign, 65534, 65534)  # another local user's, dead lease and all
    shared = leased(node_tmp / f"{node_folders.PREFIX}shared", dead_owner())
    shared.chmod(0o777)  # anyone may swap its lease
    live = node_tmp / f"{node_folders.PREFIX}live"
    live.mkdir(mode=0o700)
    write_lease(live)  # this process: alive (as a stopped actor is)
    other_ns = Owner(dead_owner().boot, 1, 1, pid_namespace() + 1)
    elsewhere = leased(node_tmp / f"{node_folders.PREFIX}elsewhere", other_ns)

    skipped: list[str] = []
    assert node_folders.prune(skipped) == 1, skipped
    assert not dead.exists()
    assert (outside / "kept.txt").read_text() == CANARY and (outside / "victim" / LEASE_FILE).exists()
    assert link.is_symlink() and foreign.is_dir() and shared.is_dir() and live.is_dir() and elsewhere.is_dir()
    assert skipped == []
