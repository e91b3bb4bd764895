"""How much host temp space a step used, for tests and benchmarks of host-side bounds."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def host_temp_peak(own: Path | None = None) -> Iterator[list[int]]:
    """The most bytes this process held in files under the temp directory (sampled every 5 ms
    through /proc/self/fd: TemporaryFile unlinks its file, so `du` would see nothing).

    With `own`, an empty folder of the caller's, tempfile writes there while the step runs and
    only files there count: what the step made, whatever else this process holds under the
    system's temp directory (a whole test run held 17.6 MiB there, past the tests' 1 MiB bound)
    and whatever other processes do."""
    folder = os.path.join(own, "") if own is not None else tempfile.gettempdir()
    peak, stop, before = [0], threading.Event(), tempfile.tempdir

    def measure() -> None:
        used = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith(folder):
                    used += os.fstat(int(fd)).st_blocks * 512
            except OSError:
                continue
        peak[0] = max(peak[0], used)

    def sample() -> None:
        while not stop.is_set():
            measure()
            time.sleep(0.005)

    if own is not None:
        tempfile.tempdir = str(own)
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
        measure()  # what the step still holds as it ends (a file it returns) counts too
        tempfile.tempdir = before
