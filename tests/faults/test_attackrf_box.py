"""Attack pass R-F on the driver's actors a node is handed (`cluster.progress.ProgressBox`, since
797855d with each ask of a live session, and `batch.on_node.AttemptLog`): R-D2 and R-D7 made
"only the driver opens a job's place" their bound, but a Ray actor handle exposes every method
of the actor, so whoever holds the handle (the node) can call `open` too. Plain objects here:
what a handle holder can do is call these methods with arguments of its choice. The driver
claims its token before any node has the handle (`cluster.driver_only`); a node's `claim` after
it gets nothing, and an `open` without the token is dropped."""

from __future__ import annotations

import pytest

from coderoom.batch.on_node import MAX_PARTIAL_BYTES, AttemptLog, Place
from coderoom.cluster.progress import MAX_JOBS, MAX_PENDING, MAX_REPORT_BYTES, ProgressBox, read_report
from coderoom.models.streaming import MAX_PIECE_CHARS
from coderoom.record.events import ModelStream
from coderoom.record.writer import encode

NODE = "a" * 56  # a node id as Ray writes it
RUNNING = "0123456789abcdef0123456789abcdef"  # a session's key, the driver's secrets.token_hex(16)


def test_r_f9_a_node_that_opens_places_of_its_own_neither_pushes_a_running_session_out_nor_fills_the_box() -> None:
    box = ProgressBox()
    token = box.claim()  # the driver, as it makes the box
    box.open(RUNNING, token)  # the driver, at its session's ask
    big = encode(ModelStream(tokens=1, text="x" * MAX_PIECE_CHARS))
    stolen = box.claim()  # the node, with the handle it was handed for its own ask
    assert stolen is None
    for n in range(MAX_JOBS):
        box.open(f"forged-{n}", [None, stolen, "0" * 32, RUNNING][n % 4])
        for _ in range(MAX_PENDING):
            box.put(f"forged-{n}", big)
    box.close(RUNNING, None)  # nor may it close the session's place
    box.put(RUNNING, encode(ModelStream(tokens=7)))
    assert [read_report(r).tokens for r in box.take(RUNNING)] == [7]  # type: ignore[union-attr]
    held = sum(len(r) for reports in box._jobs.values() for r in reports)
    assert held < MAX_PENDING * MAX_REPORT_BYTES * 2  # not MAX_JOBS sessions' worth of one node's reports


def test_r_f10_a_node_that_opens_jobs_of_its_own_in_the_attempt_log_is_not_kept() -> None:
    log = AttemptLog()
    assert log.claim() is not None  # the driver's, as it makes the log
    for n in range(4):  # unbounded in the number of keys: any n, each up to MAX_LOST x MAX_PARTIAL_BYTES
        log.open(f"forged-{n}", log.claim())  # the node: a second claim gets nothing
        log.begin(f"forged-{n}", "a1", Place(NODE, "127.0.0.1"))
        log.line(f"forged-{n}", "a1", "x" * 1024)
    assert log._jobs == {}, f"kept {len(log._jobs)} jobs the driver never ran (each up to {MAX_PARTIAL_BYTES:,} bytes an attempt)"
