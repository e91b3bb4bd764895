"""How the local sandbox's host side reads a command's output pipes (`process.PipeReader`, and
`pump` on top of it): every byte to EOF, then the pipe closed and no longer watched, with no
task of its own; stopped early, or cancelled, it closes the pipe at once."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from coderoom.sandboxes.local.process import PipeReader, pump


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


async def test_a_reader_hands_over_every_chunk_and_closes_the_pipe_at_eof() -> None:
    read_end, write_end = os.pipe()
    chunks: list[bytes] = []
    reader = PipeReader(read_end, chunks.append)
    tasks_before = len(asyncio.all_tasks())

    def write() -> None:  # more than a pipe holds: the reader must read while it is written
        with os.fdopen(write_end, "wb") as out:
            out.write(b"x" * 100_000 + b"end")

    writer = threading.Thread(target=write)
    writer.start()
    await asyncio.wait_for(reader.eof, 5)
    writer.join()
    assert b"".join(chunks) == b"x" * 100_000 + b"end"
    assert len(chunks) > 1
    assert _closed(read_end)
    assert len(asyncio.all_tasks()) == tasks_before  # it ran in the loop's callbacks


async def test_a_reader_closed_before_eof_stops_and_closes_the_pipe() -> None:
    read_end, write_end = os.pipe()
    chunks: list[bytes] = []
    reader = PipeReader(read_end, chunks.append)
    reader.close()
    reader.close()  # idempotent
    assert reader.eof.done()
    assert _closed(read_end)
    os.close(write_end)
    assert chunks == []


async def test_a_cancelled_pump_closes_its_pipe_at_once() -> None:
    read_end, write_end = os.pipe()
    task = asyncio.ensure_future(pump(read_end, lambda _: None))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _closed(read_end)
    os.close(write_end)
