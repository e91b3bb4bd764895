"""Session start has a deadline: a start with network on once hung for good after
tests/faults/test_runs.py, waiting for a pid 1 whose report had been read and dropped in pieces
(see `status`); now the report survives any split, and a start that cannot complete fails
naming START_TIMEOUT_S and leaves nothing behind."""

from __future__ import annotations

import json
import os

import pytest
from backends import require_backend

from coderoom.errors import SandboxFailed
from coderoom.sandboxes import Limits

from .test_start_close import assert_nothing_left, cgroup_of

# bwrap 0.8's first status line, as its three write(2) calls
PIECES = (b'{ "child-pid": 4242', b', "cgroup-namespace": 4026531835, "user-namespace": 4026532001', b" }\n")


def test_the_pid_1_report_survives_being_read_in_the_pieces_bwrap_writes() -> None:
    from coderoom.sandboxes.local.status import StatusPipe

    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    status = StatusPipe(read_end)
    try:
        for piece in PIECES:
            assert status.child_pid() is None
            os.write(write_end, piece)
        assert status.child_pid() == 4242
        os.write(write_end, json.dumps({"exit-code": 0}).encode() + b"\n")
        assert status.child_pid() == 4242
    finally:
        status.close()
        os.close(write_end)


async def test_a_network_start_past_its_deadline_fails_naming_it_and_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    require_backend("local")
    from coderoom.sandboxes.local import bwrap, network, sandbox

    if network.unavailable_reason():
        pytest.skip(network.unavailable_reason())
    monkeypatch.setattr(sandbox, "START_TIMEOUT_S", 0.001)  # too short for bwrap and slirp4netns
    bw, reason = bwrap.probe()
    assert bw is not None, reason
    box = await sandbox.LocalSandbox.create(Limits(network=True), bw)
    with pytest.raises(SandboxFailed, match="START_TIMEOUT_S"):
        await box.start()
    group = cgroup_of(box.host_dir)
    await box.close()
    assert_nothing_left(box.host_dir, group)
