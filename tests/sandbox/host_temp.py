"""How much host temp space a step used, for tests and benchmarks of host-side bounds."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def host_temp_peak() -> Iterator[list[int]]:
    """The most bytes this process held in files under the temp directory (sampled every 5 ms
    through /proc/self/fd: TemporaryFile unlinks its file, so `du` would see nothing)."""
    tmp, peak, stop = tempfile.gettempdir(), [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            used = 0
            for fd in os.listdir("/proc/self/fd"):
                try:
                    if os.readlink(f"/proc/self/fd/{fd}").startswith(tmp):
                        used += os.fstat(int(fd)).st_blocks * 512
                except OSError:
                    continue
            peak[0] = max(peak[0], used)
            time.sleep(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
