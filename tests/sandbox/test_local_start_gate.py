"""Local backend: the start gate (`local/gate.py`). Nothing of a sandbox runs outside its memory
cgroup. bwrap's pid 1 waits on --block-fd, and bwrap goes on at EOF just as at a byte: that is
what pid 1 reads when the host dies while it waits there (the gate's write end closes with the
host's other fds). A launcher that starts un-admitted must stop before it prepares anything."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from backends import require_backend

from coderoom.errors import SandboxFailed
from coderoom.sandboxes.limit_values import PlainLimits
from coderoom.sandboxes.local import cgroup, gate
from coderoom.sandboxes.oneshot import run_once


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


needs_cgroup = pytest.mark.skipif(cgroup.mode() is cgroup.Mode.NONE, reason="no memory cgroup here")


@needs_cgroup
async def test_a_gate_opened_by_eof_runs_no_command_outside_the_memory_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """G04: the gate's write end closes before pid 1 is admitted (the host killed at the gate,
    here without killing the test). Before the fix the launcher started outside the cgroup,
    prepared a command namespace and said ready; a command then ran with no memory limit."""

    def open_without_admitting(self: gate.Admission) -> None:
        self._read_pid()
        os.close(self._info_r)
        os.close(self._block_w)  # EOF at pid 1, as when this process dies at the gate
        self._block_w = -1

    monkeypatch.setattr(gate.Admission, "_admit", open_without_admitting)
    spec = SimpleNamespace(backend="local", limits=PlainLimits())
    with pytest.raises(SandboxFailed, match="not admitted to its memory cgroup"):
        await run_once(spec, ["echo", "ran outside the memory cgroup"], None)  # type: ignore[arg-type]
