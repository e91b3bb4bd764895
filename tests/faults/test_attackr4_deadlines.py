"""Ray warm pool, placement and deadlines attack pass (docs/security.md, R-E): the deadline of a
session's call must not count the time the call waits on its node behind another one.

The node runs a session's cells one at a time (the kernel's lock), so a client's second cell,
sent while its first runs (the page and an MCP client on one session, or one client that does
not wait), waits on the node for the first before its own time starts. Its deadline (R-B9,
`RaySession._deadline`: a cell's timeout + START_WAIT_S + MARGIN_S) used to start when it was
sent: two healthy cells of the session's own timeout in a row (116 s each under the default
120 s limit, against a deadline of 206 s) declared the session lost, its actor killed, its
workspace gone (R-E1).

So that the test takes seconds, not minutes, the margins are cut (START_WAIT_S, MARGIN_S): the
cells still keep well within the session's timeout, and the second ends past its deadline only
if that deadline counts its wait behind the first.

The cluster is Ray's one-machine multi-node `Cluster` (`ray_sessions_cluster`, tests/conftest.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coderoom.record import read_record
from coderoom.sandboxes.limits import Limits

RAY_NODES = 1  # one one-CPU node (`ray_sessions_cluster`, tests/conftest.py)
TIMEOUT_S = 14.0  # the session's limit: a cell may take cell_timeout(14) = 10 s
CELL_S = 8  # each cell's own time, well within it (7 s to spare on its 15 s deadline)
SLACK_S = 120


async def test_a_cell_queued_behind_another_on_its_node_is_not_declared_lost(ray_sessions_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from coderoom.service import ray_session
    from coderoom.service.ray_session import RayOpener

    session = await RayOpener({})(model="offline", limits=Limits(cpus=1, timeout=TIMEOUT_S), runs_dir=tmp_path / "runs")
    try:
        assert (await session.run_python("started = True")).status == "ok"  # the kernel up, before the margins are cut
        monkeypatch.setattr(ray_session, "START_WAIT_S", 0.0)
        monkeypatch.setattr(ray_session, "MARGIN_S", 5.0)  # each cell's deadline: 10 + 0 + 5 = 15 s > CELL_S
        cell = f"import time; time.sleep({CELL_S}); 'done'"
        first, second = await asyncio.wait_for(
            asyncio.gather(session.run_python(cell), session.run_python(cell), return_exceptions=True), 4 * CELL_S + SLACK_S
        )  # the second waits on the node for the first: ~16 s from its sending, within its own 8 s
        assert session.lost is None, session.lost  # was: "gave no answer within 15 s (to run_python)"
        assert [getattr(result, "status", result) for result in (first, second)] == ["ok", "ok"]
        assert (await session.run_python("started")).status == "ok"  # the kernel and its variables kept
    finally:
        monkeypatch.undo()
        if session.lost is None:
            await session.close(keep_unsaved=False)
    assert read_record(session.run_dir).events[-1].status == "ok"  # closed and saved as on one machine
