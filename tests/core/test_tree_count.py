"""The quick entry count of a hostile workspace tree (`hostile.tree.count_entries`): the watchdog's
every-poll look for a file-creating loop, so it must agree with the full walk and hold the same
limits without following anything the sandbox planted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coderoom.hostile import tree


def test_it_counts_every_entry_the_full_walk_sees(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    (tmp_path / "g").write_text("y")
    os.symlink("/etc", tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")

    assert tree.count_entries(tmp_path) == sum(1 for _ in tree.walk(tmp_path)) == 6


def test_a_symlink_to_a_big_directory_counts_as_one_entry(tmp_path: Path) -> None:
    big = tmp_path / "outside"
    big.mkdir()
    for i in range(50):
        (big / str(i)).touch()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.symlink(big, workspace / "link")

    assert tree.count_entries(workspace, max_entries=10) == 1


def test_past_the_entry_limit_it_raises_naming_the_limit(tmp_path: Path) -> None:
    for i in range(11):
        (tmp_path / str(i)).touch()

    assert tree.count_entries(tmp_path, max_entries=11) == 11
    with pytest.raises(tree.WorkspaceLimitError, match="more than 10 entries"):
        tree.count_entries(tmp_path, max_entries=10)


def test_past_the_depth_limit_it_raises_as_the_walk_does(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["d"] * 5)
    deep.mkdir(parents=True)

    assert tree.count_entries(tmp_path, max_depth=6) == 5
    with pytest.raises(tree.WorkspaceLimitError, match="deeper than 5 levels"):
        tree.count_entries(tmp_path, max_depth=5)
    with pytest.raises(tree.WorkspaceLimitError, match="deeper than 5 levels"):
        list(tree.walk(tmp_path, max_depth=5))


def test_it_leaves_no_descriptor_open_when_it_raises(tmp_path: Path) -> None:
    tmp_path.joinpath(*["d"] * 8).mkdir(parents=True)
    before = len(os.listdir("/proc/self/fd"))

    with pytest.raises(tree.WorkspaceLimitError):
        tree.count_entries(tmp_path, max_depth=4)

    assert len(os.listdir("/proc/self/fd")) == before
