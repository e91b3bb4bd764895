"""Package environment pass (attackenv, 2026-12-06), the local watchdog: W1-W3.

The quick entry count (`tree.count_entries`) that the long-lived processes' watchdog takes every
poll kept an open directory fd for every directory it had listed but not yet entered: one folder
holding a few thousand empty directories (far under the 100,000-entry cap) made it fail with
EMFILE under the common soft RLIMIT_NOFILE of 1024, the exception ended `_watch_processes`, and
the kernel went on writing past workspace_size unchecked."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import require_backend

from coderoom.hostile import tree
from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session

SOFT_NOFILE = 1024  # the usual default soft limit of a login shell's processes


@pytest.fixture
def usual_open_file_limit() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(SOFT_NOFILE, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_counting_a_wide_folder_holds_a_bounded_number_of_descriptors(tmp_path: Path, usual_open_file_limit: None) -> None:
    for index in range(3 * SOFT_NOFILE):
        (tmp_path / f"d{index}").mkdir()
    assert tree.count_entries(tmp_path) == 3 * SOFT_NOFILE


def test_counting_still_refuses_a_tree_past_the_depth_limit(tmp_path: Path) -> None:
    deep = tmp_path
    for _ in range(12):
        deep = deep / "d"
    deep.mkdir(parents=True)
    with pytest.raises(tree.WorkspaceLimitError, match="deeper than 10"):
        tree.count_entries(tmp_path, max_depth=10)
    assert tree.count_entries(tmp_path, max_depth=13) == 12


async def test_a_wide_folder_does_not_stop_the_long_lived_watchdog(usual_open_file_limit: None) -> None:
    require_backend("local")
    limits = Limits(workspace_size="2M", file_size="64M")
    writer = (
        f"python3 -c \"import os\nos.mkdir('wide')\nfor i in range({3 * SOFT_NOFILE}): os.mkdir(f'wide/d{{i}}')\"; "
        "echo made; sleep 2; for f in a b c; do head -c 1500000 /dev/zero > $f; done; echo written; sleep 1000"
    )
    async with open_session(SandboxSpec(backend="local", limits=limits)) as session:
        started = await session.pty_exec_start(writer, yield_time_s=0.25)
        assert started.process_id is not None
        update, output = started, started.output
        deadline = time.monotonic() + 60
        while update.exit_code is None and time.monotonic() < deadline:
            update = await session.pty_write_stdin(session_id=started.process_id, chars="", yield_time_s=1)
            output += update.output
        assert update.exit_code is not None, f"still running over the workspace limit: {output[-300:]!r}"
        assert b"workspace" in output and b"limit" in output, output[-300:]
