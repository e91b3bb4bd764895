"""A memory limit is memory, counted by the sandbox's cgroup, not address space (issue 20): a
run_python kernel with pandas imported maps far more address space than it uses, so at 256M a
session imports pandas on every backend as a plain process does, while an allocation well over
the limit is still stopped with the limit named."""

from __future__ import annotations

from pathlib import Path

import pytest

from coderoom import Session
from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.local import cgroup

ONE_GIB_TOUCHED = "python3 -c 'bytearray(1024 * 2**20)'"


async def test_a_session_imports_pandas_at_256M_and_memory_is_still_enforced(backend: str, tmp_path: Path) -> None:
    if backend == "local" and cgroup.mode() is cgroup.Mode.NONE:
        pytest.skip("no memory cgroup here: RLIMIT_AS = memory is the only bound (enforcement.address_space_limit)")
    session = await Session.open(model="offline", sandbox=backend, runs_dir=tmp_path, limits=Limits(memory="256M"))
    try:
        imported = await session.run_python("import pandas\nprint('imported', pandas.DataFrame({'a': [1, 2]}).a.sum())")
        assert imported.status == "ok" and "imported 3" in imported.text, imported.text
        command = await session.exec(ONE_GIB_TOUCHED)
        assert command.exit_code == 137, command
        note = command.stderr.rsplit("[coderoom: ", 1)[-1]
        assert "memory limit (memory = " in note and "256" in note, command.stderr  # the limit, named
        cell = await session.run_python("big = bytearray(1024 * 2**20)")
        assert cell.status == "crashed" and "the memory limit" in cell.text and "STATE LOST" in cell.text
    finally:
        await session.close()
