"""A small disk for the runs folder: a 2 MiB tmpfs the test mounts (root only; skipped
otherwise) and unmounts, and a way to fill it and give the space back."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

DISK = "no space left on the disk holding"  # how every surface names a full runs disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted at the end."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(disk: Path, *, leave: int = 0) -> Path:
    """Take every free block of `disk` but `leave` bytes; the filler file, to remove when space
    should return."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (65536, 4096, 1):  # down to the last byte of the last page
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return filler
