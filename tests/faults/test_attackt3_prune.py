"""Attack pass T-A (2026-12-07) on R-F6's fix, `sandboxes.recovering.held`: a failure to tell
whether a folder is held raises `CannotTell` (the prune leaves the folder and names why, a
recovery does not run), and only a folder that is not there to hold is nobody's.

T-A5: what a hostile leftover can put where a held folder or a run folder is expected, a FIFO
(whose plain open for reading blocks until a writer comes) or a socket: the hold answers at
once (no open of the FIFO itself happens: O_DIRECTORY refuses it first), it is nobody's, and a
dead worker's folder holding them is pruned, nothing hung and nothing outside it touched.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coderoom.cluster import node_folders
from coderoom.sandboxes import records
from coderoom.sandboxes.leases import LEASE_FILE

DEAD_OWNER = {"boot": "a boot long gone", "pid": 2, "start": 0, "pidns": 0}  # what a crashed process leaves

_HOLD_EACH = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from coderoom.sandboxes import recovering
    for name in sys.argv[1:]:
        with recovering.held(Path(name)) as mine:
            print(mine)
    """
)



def test_t_a5_a_fifo_or_socket_where_a_folder_is_held_is_nobodys_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # nobody ever opens its other end
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp_path / "socket"))
        out = subprocess.run(
            [sys.executable, "-c", _HOLD_EACH, str(tmp_path / "fifo"), str(tmp_path / "socket")],
            capture_output=True, text=True, timeout=30,  # a blocking open of the FIFO would hang here
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_t_a5_a_dead_workers_folder_with_fifos_for_run_folders_is_pruned_without_hanging(temp: Path) -> None:
    dead = node_folders.make()
    records.write(dead, LEASE_FILE, json.dumps(DEAD_OWNER).encode(), replace=True)
    os.mkfifo(dead / "run-1")
    (dead / "run-2").mkdir()
    os.mkfifo(dead / "run-2" / "workspace")
    out = subprocess.run(
        [sys.executable, "-c", "import sys, tempfile; tempfile.tempdir = sys.argv[1]\n"
         "from coderoom.cluster import node_folders\nskipped = []\nprint(node_folders.prune(skipped), skipped)", str(temp)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "[]"] and not dead.exists()
