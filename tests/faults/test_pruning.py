"""`sandboxes.pruning`: how a prune removes one abandoned folder (only while no recovery holds it;
one it cannot remove is left and named, and the prune goes on), and that every folder prune of
this kind goes through it: the local backend's session folders (`local.host_dir`) and the Ray
workers' runs folders (`cluster.node_folders`)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from coderoom.cluster import node_folders
from coderoom.hostile import tree
from coderoom.sandboxes import pruning, records, recovering
from coderoom.sandboxes.leases import LEASE_FILE
from coderoom.sandboxes.local import host_dir

DEAD_OWNER = {"boot": "a boot long gone", "pid": 2, "start": 0, "pidns": 0}  # what a crashed process leaves


def _run_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "abandoned"
    (folder / "run-1").mkdir(parents=True)
    return folder


def test_a_folder_is_removed_while_this_process_holds_it_and_what_a_recovery_may_hold_in_it(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path)
    with recovering.held(folder / "run-1") as mine:  # as a recovery holds the run folder it saves into
        assert mine
        assert not pruning.remove_held(folder, tree.remove_tree, [], holding=lambda f: [f / "run-1"])
        assert folder.is_dir()
    with recovering.held(folder) as mine:  # as another prune, or a recovery of the folder itself
        assert mine
        assert not pruning.remove_held(folder, tree.remove_tree, [])
        assert folder.is_dir()
    assert pruning.remove_held(folder, tree.remove_tree, [], holding=lambda f: [f / "run-1"])
    assert not folder.exists()


def test_a_folder_that_cannot_be_removed_is_left_and_named_in_one_printable_line(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path)
    refusal = OSError("the disk says no \x1b[2J")

    def refuse(_: Path) -> None:
        raise refusal

    skipped: list[str] = []
    assert not pruning.remove_held(folder, refuse, skipped)
    assert skipped == [f"'{folder}' left in place: OSError: 'the disk says no \\x1b[2J'"]  # escaped: no terminal control
    assert folder.is_dir()
    assert not pruning.remove_held(folder, refuse, None)  # no list: still left, never raised


def test_judging_a_folder_or_naming_what_to_hold_may_fail_too_and_costs_that_folder_alone(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path)

    def unreadable(_: Path) -> Any:
        raise PermissionError("hostile entry")

    skipped: list[str] = []
    assert not pruning.remove_held(folder, tree.remove_tree, skipped, candidate=unreadable)
    assert not pruning.remove_held(folder, tree.remove_tree, skipped, holding=unreadable)
    assert [line.split(" left in place: ")[1] for line in skipped] == ["PermissionError: 'hostile entry'"] * 2
    assert folder.is_dir()


def test_a_folder_that_is_no_candidate_is_neither_held_nor_removed(tmp_path: Path) -> None:
    folder = _run_folder(tmp_path)

    def never(_: Path) -> list[Path]:
        raise AssertionError("held a folder that is not the prune's")

    skipped: list[str] = []
    assert not pruning.remove_held(folder, tree.remove_tree, skipped, candidate=lambda f: False, holding=never)
    assert skipped == [] and folder.is_dir()


def test_the_local_backends_and_the_ray_workers_prunes_both_go_through_it(
    tmpdir_for_sessions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmpdir_for_sessions))
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir_for_sessions))
    session, actor = host_dir.make(), node_folders.make()
    for folder in (session, actor):
        records.write(folder, LEASE_FILE, json.dumps(DEAD_OWNER).encode(), replace=True)
    seen: list[Path] = []
    real = pruning.remove_held

    def through(folder: Path, *args: Any, **kwargs: Any) -> bool:
        seen.append(folder)
        return real(folder, *args, **kwargs)

    monkeypatch.setattr(pruning, "remove_held", through)
    assert node_folders.prune() == 1 and seen == [actor]
    assert host_dir.prune() == 1 and seen == [actor, session]
    assert not session.exists() and not actor.exists()
