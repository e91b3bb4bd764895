"""A signal to `coderoom sandbox run -- sleep 100` leaves nothing behind (local): SIGTERM, SIGINT
and SIGHUP close the sandbox (no process, no session folder, no memory cgroup) and exit 128+N;
after a SIGKILL, the local backend's prune (`coderoom sandbox prune`) takes the folder and its cgroup. Through the fast
path (the entry point) and the typer command alike."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from coderoom.sandboxes.local import host_dir

ENTRIES = {
    "fast": [sys.executable, "-c", "from coderoom.cli import main; main()"],
    "typer": [sys.executable, "-c", "from coderoom.cli import app; app()"],
}


def _sleepers(marker: str) -> list[int]:
    """Host pids of the sandboxed `sh ... MARKER` (coderoom's own command line holds it too)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0] == b"sh" and marker.encode() in argv:
                found.append(int(entry.name))
    return found


def _start(entry: str, tmpdir: Path, marker: str) -> tuple[subprocess.Popen[bytes], Path, Path | None]:
    """`sandbox run -- sh -c 'sleep 100; :' MARKER`, once its command runs: the process, its
    session folder and its memory cgroup (None where there is none)."""
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    argv = [*ENTRIES[entry], "sandbox", "run", "--sandbox", "local", "--", "sh", "-c", "sleep 100; :", marker]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not _sleepers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleepers(marker), "the sandboxed command never started"
    [folder] = list(tmpdir.glob(f"{host_dir.PREFIX}*"))
    record = folder / host_dir.CGROUP_FILE
    group = Path(record.read_text()) if record.exists() else None
    assert group is None or group.is_dir()
    return process, folder, group


def _nothing_left(marker: str, folder: Path, group: Path | None) -> None:
    deadline = time.monotonic() + 10
    while (_sleepers(marker) or folder.exists() or (group and group.exists())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleepers(marker) == []
    assert not folder.exists()
    assert group is None or not group.exists()


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["TERM", "INT", "HUP"])
def test_a_signal_closes_the_sandbox_and_exits_128_plus_n(entry: str, signum: int, tmpdir_for_sessions: Path) -> None:
    marker = f"cr-sig-{entry}-{signum}-{os.getpid()}"
    process, folder, group = _start(entry, tmpdir_for_sessions, marker)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 128 + signum, stderr
    assert f"interrupted by {signal.Signals(signum).name}".encode() in stderr
    _nothing_left(marker, folder, group)


@pytest.mark.parametrize("entry", ENTRIES)
def test_after_a_sigkill_prune_takes_the_folder_and_its_cgroup(entry: str, tmpdir_for_sessions: Path) -> None:
    marker = f"cr-kill-{entry}-{os.getpid()}"
    process, folder, group = _start(entry, tmpdir_for_sessions, marker)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while _sleepers(marker) and time.monotonic() < deadline:  # bwrap dies with its parent
        time.sleep(0.05)
    assert _sleepers(marker) == []
    env = {**os.environ, "TMPDIR": str(tmpdir_for_sessions)}
    # what `coderoom sandbox prune` does for local (its Docker half may race other users' containers)
    prune = "from coderoom.sandboxes import get_backend; print(get_backend('local').prune())"
    done = subprocess.run([sys.executable, "-c", prune], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    _nothing_left(marker, folder, group)


@pytest.mark.parametrize("step", ["claim", "chown"])
def test_a_signal_while_the_session_folder_is_made_leaves_no_folder(
    step: str, tmpdir_for_sessions: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """G15: SIGTERM/SIGINT in the first milliseconds of `sandbox run` can land in `host_dir.make`
    (prestart makes the folder before anything else). The folder was left half made, owned by
    root, which `prune` never takes (it takes only folders owned by bwrap's uid): one per such
    signal, for good. Seen in a loop of SIGTERMs 0-100 ms after start (exit 143)."""
    from coderoom.interrupts import Interrupted
    from coderoom.sandboxes.local import leases

    def interrupted(*args: object, **kwargs: object) -> None:
        raise Interrupted(signal.SIGTERM)  # what the handler raises in the main thread

    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir_for_sessions))
    monkeypatch.setattr(leases if step == "claim" else os, step, interrupted)
    with pytest.raises(Interrupted):
        host_dir.make()
    assert list(tmpdir_for_sessions.glob(f"{host_dir.PREFIX}*")) == []
