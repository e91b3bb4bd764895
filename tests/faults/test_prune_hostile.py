"""`prune` and session close run as root over folders uid 65534 can write: the attacks of issue
19, with real processes. A uid-65534 host process races root's removal with links; a forged
folder names another live session's cgroup; a hostile folder tries to stop `prune` for every
folder after it."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import require_backend
from coderoom.hostile import tree
from coderoom.sandboxes import records
from coderoom.sandboxes.leases import LEASE_FILE
from coderoom.sandboxes.local import cgroup, host_dir

SANDBOX_UID = 65534  # bwrap's host uid when coderoom runs as root (`bwrap.host_id`)
RACE_S = 4.0  # removals of a tree a racer keeps turning into links
RACE_MIN_REMOVALS = 200


def _as_sandbox_uid() -> None:
    os.setgroups([])
    os.setgid(SANDBOX_UID)
    os.setuid(SANDBOX_UID)
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc/self, as any process started as it has


_PR_SET_DUMPABLE = 4


@contextlib.contextmanager
def _forked(body_as_sandbox_uid: object) -> Iterator[int]:
    """Run `body_as_sandbox_uid()` in a forked child as uid 65534 until the block ends (SIGKILL by pid)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            _as_sandbox_uid()
            body_as_sandbox_uid()  # type: ignore[operator]
        finally:
            os._exit(0)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp dir of the test's own in /tmp where uid 65534 can make folders, as in /tmp itself."""
    if os.geteuid() != 0:
        pytest.skip("the attack is on root's removal; needs root to drop to uid 65534")
    base = Path(tempfile.mkdtemp(prefix="coderoom-prune-test-", dir="/tmp"))
    base.chmod(0o1777)  # like /tmp: anyone may make a folder here
    try:
        yield base
    finally:
        tree.remove_tree(base)


_RENAME_EXCHANGE = 2


def _exchange(libc: ctypes.CDLL, first: bytes, second: bytes) -> None:
    """renameat2(RENAME_EXCHANGE): the two names swap at once; each always names something."""
    libc.renameat2(_AT_FDCWD, first, _AT_FDCWD, second, _RENAME_EXCHANGE)


_AT_FDCWD = -100


def _swap_forever(arena: Path, canaries: tuple[Path, Path]) -> None:
    """As uid 65534: keep a tree at `arena/tree` whose folders swap places with links to root's
    canaries as fast as the kernel allows, so a check-then-chmod by name lands on a canary."""
    libc = ctypes.CDLL(None, use_errno=True)
    os.chdir(arena)
    pairs = [(f"tree/d{index}".encode(), f"tree/l{index}".encode()) for index in range(2)]
    while True:
        with contextlib.suppress(OSError):
            os.mkdir("tree", 0o755)
        for (folder, link), canary in zip(pairs, canaries):
            with contextlib.suppress(OSError):
                os.mkdir(folder, 0o555)  # read-only: the remover must chmod it
            with contextlib.suppress(OSError):
                os.symlink(canary, link)
        for _ in range(200):
            for folder, link in pairs:
                _exchange(libc, folder, link)


def test_a_racing_uid_65534_process_never_makes_root_chmod_through_a_link(shared_tmp: Path) -> None:
    """Attack 19a: remove_tree checked an entry without following links, then chmod-ed it by
    name, which follows: a uid-65534 process swapping a folder for a link between the two made
    root chmod any path (a root-owned canary became 0700 after 8 prunes). Removal now acts only
    through O_NOFOLLOW fds; the canaries keep their modes however the race falls."""
    canary_file, canary_dir = shared_tmp / "canary-file", shared_tmp / "canary-dir"
    canary_file.write_text("root's")
    canary_file.chmod(0o644)
    canary_dir.mkdir(mode=0o755)
    canary_dir.chmod(0o755)
    arena = shared_tmp / "arena"
    arena.mkdir()
    os.chown(arena, SANDBOX_UID, SANDBOX_UID)
    removals = refused = 0
    with _forked(lambda: _swap_forever(arena, (canary_file, canary_dir))):
        end = time.monotonic() + RACE_S
        while time.monotonic() < end or removals < RACE_MIN_REMOVALS:
            if not (arena / "tree").exists():
                time.sleep(0.001)
                continue
            try:
                tree.remove_tree(arena / "tree")
            except OSError:  # the tree kept changing: refused, never followed
                refused += 1
            removals += 1
            assert stat.S_IMODE(canary_file.stat().st_mode) == 0o644, f"canary file chmod-ed after {removals} removals"
            assert stat.S_IMODE(canary_dir.stat().st_mode) == 0o755, f"canary dir chmod-ed after {removals} removals"
    assert canary_file.read_text() == "root's"
    assert refused < removals, "every removal was refused: the race was not run"


ENTRY = [sys.executable, "-c", "from coderoom.cli import main; main()"]
DEAD_OWNER = {"boot": "a boot long gone", "pid": 2, "start": 0, "pidns": 0}  # what a crashed run leaves


def _sleepers(marker: str) -> list[int]:
    """Host pids of the live session's sandboxed `sh ... MARKER` (coderoom's own command line
    holds the marker too)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[0] == b"sh" and marker.encode() in argv:
                found.append(int(pid))
    return found


@contextlib.contextmanager
def _live_session(sessions: Path) -> Iterator[tuple[Path, Path, str]]:
    """A live `sandbox run` in `sessions`: its folder, its memory cgroup and its command's marker."""
    marker = f"live-session-{os.getpid()}-{time.monotonic_ns()}"
    env = {**os.environ, "TMPDIR": str(sessions)}
    argv = [*ENTRY, "sandbox", "run", "--sandbox", "local", "--", "sh", "-c", "sleep 100; :", marker]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not _sleepers(marker):
            assert time.monotonic() < deadline and process.poll() is None, "the live session never started"
            time.sleep(0.05)
        [folder] = sessions.glob(f"{host_dir.PREFIX}*")
        group = cgroup.recorded(folder / host_dir.CGROUP_FILE)
        if group is None:
            pytest.skip("no memory cgroup here: nothing for a record to name")
        yield folder, group, marker
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _prune_local(sessions: Path) -> tuple[int, list[str]]:
    """The local backend's prune as its own process over `sessions`: (removed, skipped)."""
    code = "import json; from coderoom.sandboxes.local import host_dir; s = []; print(json.dumps([host_dir.prune(s), s]))"
    env = {**os.environ, "TMPDIR": str(sessions)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and not done.stderr, done.stderr
    removed, skipped = json.loads(done.stdout)
    return removed, skipped


def _forge_as_sandbox_uid(folder: Path, live_group: Path, live_bwrap: str) -> None:
    """As uid 65534: a folder shaped like a crashed session's, whose records name the live one's
    cgroup and bwrap group (before issue 19, a folder of bwrap's uid was taken for a session's)."""
    pid = os.fork()
    if pid == 0:
        try:
            _as_sandbox_uid()
            os.mkdir(folder, 0o700)
            (folder / LEASE_FILE).write_text(json.dumps(DEAD_OWNER))
            (folder / host_dir.CGROUP_FILE).write_text(str(live_group))
            (folder / host_dir.BWRAP_FILE).write_text(live_bwrap)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert folder.stat().st_uid == SANDBOX_UID, "the forger did not make its folder"


@pytest.mark.parametrize("forger", ["uid 65534", "a record in our own folder"])
def test_a_forged_record_never_reaches_another_live_session(
    forger: str, shared_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack 19b: a forged folder's `cgroup` record naming another session's cgroup made root's
    `prune` SIGKILL that live session and remove its cgroup. A folder uid 65534 made or can write
    is not a session's; and even a record in a folder of ours may only name that folder's own
    cgroup (`cgroup.name_for`), so the live session, its processes and its cgroup survive."""
    require_backend("local")
    with _live_session(shared_tmp) as (live, group, marker):
        live_bwrap = (live / host_dir.BWRAP_FILE).read_text()
        if forger == "uid 65534":
            forged = shared_tmp / f"{host_dir.PREFIX}forged"
            _forge_as_sandbox_uid(forged, group, live_bwrap)
        else:
            monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))
            forged = host_dir.make()  # a real session folder, left by a "crashed" run
            records.write(forged, LEASE_FILE, json.dumps(DEAD_OWNER).encode(), replace=True)
            records.write(forged, host_dir.CGROUP_FILE, os.fsencode(group), replace=True)
            records.write(forged, host_dir.BWRAP_FILE, live_bwrap.encode(), replace=True)
        removed, skipped = _prune_local(shared_tmp)
        assert _sleepers(marker), "prune killed the live session"
        assert group.is_dir(), "prune removed the live session's cgroup"
        assert live.is_dir() and skipped == []
        assert removed == (0 if forger == "uid 65534" else 1)
        assert forged.exists() == (forger == "uid 65534"), "a folder of uid 65534 was taken for ours"


@contextlib.contextmanager
def _unremovable_folder(sessions: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An abandoned session folder root cannot remove (an immutable file in its workspace)."""
    monkeypatch.setattr(tempfile, "tempdir", str(sessions))
    folder = host_dir.make()
    records.write(folder, LEASE_FILE, json.dumps(DEAD_OWNER).encode(), replace=True)
    stuck = folder / "workspace" / "stuck\x1b[2J"  # a name that would clear a terminal
    stuck.write_text("")
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available on this file system")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)


def test_a_folder_prune_cannot_remove_is_reported_and_the_rest_are_pruned(
    shared_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack 19c: one hostile folder made `prune` stop with a traceback and skip every folder
    after it. It is now left with one terminal-safe line naming it, every other abandoned folder
    is removed, no traceback is printed, and `coderoom sandbox prune` exits 1 (something was left)."""
    require_backend("local")
    with _unremovable_folder(shared_tmp, monkeypatch) as hostile:
        others = []
        for _ in range(3):
            other = host_dir.make()
            records.write(other, LEASE_FILE, json.dumps(DEAD_OWNER).encode(), replace=True)
            others.append(other)
        env = {**os.environ, "TMPDIR": str(shared_tmp), "DOCKER_HOST": "unix:///nonexistent"}  # local alone
        done = subprocess.run([*ENTRY, "sandbox", "prune"], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert "removed 3 session folders (local)" in done.stdout
        [line] = done.stderr.splitlines()
        assert line.startswith("coderoom: error: skipped ") and hostile.name in line
        assert "\x1b" not in line
        assert hostile.is_dir() and not any(other.exists() for other in others)


def _readers(folder: Path) -> dict[str, object]:
    """What each reader of a session folder's records makes of them (None: no record)."""
    from coderoom.sandboxes.leases import read_lease
    from coderoom.sandboxes.local import leases

    return {
        "lease": read_lease(folder),
        "cgroup": cgroup.recorded(folder / host_dir.CGROUP_FILE),
        "bwrap": leases.recorded_group(folder / host_dir.BWRAP_FILE),
        "session": records.read(folder, host_dir.SESSION_FILE, 64),
    }


def _write_all(folder: Path) -> None:
    records.write(folder, LEASE_FILE, json.dumps(DEAD_OWNER).encode())
    group = Path("/sys/fs/cgroup/memory") / cgroup.name_for(folder)
    records.write(folder, host_dir.CGROUP_FILE, os.fsencode(group))
    records.write(folder, host_dir.BWRAP_FILE, b"4242")
    records.write(folder, host_dir.SESSION_FILE, b"a-session")


NAMES = (LEASE_FILE, host_dir.CGROUP_FILE, host_dir.BWRAP_FILE, host_dir.SESSION_FILE)


FORGERIES = ["folder of uid 65534", "records of uid 65534", "links", "hard links", "writable by others"]


@pytest.mark.parametrize("forgery", FORGERIES)
def test_every_record_reader_refuses_what_uid_65534_could_have_written(forgery: str, shared_tmp: Path) -> None:
    """The records `prune` acts on are read in one place (`records.read`): each reader takes a
    record we wrote in our own folder, and none takes one uid 65534 could have written or
    swapped (its folder or file, a link or a hard link to ours, a file others may write)."""
    good = shared_tmp / "good"
    good.mkdir(mode=0o700)
    _write_all(good)
    assert all(value is not None for value in _readers(good).values()), _readers(good)
    folder = shared_tmp / "forged"
    folder.mkdir(mode=0o700)
    if forgery == "links":
        for name in NAMES:
            (folder / name).symlink_to(good / name)
    elif forgery == "hard links":
        for name in NAMES:
            os.link(good / name, folder / name)
    else:
        _write_all(folder)
        if forgery == "writable by others":
            for name in NAMES:
                (folder / name).chmod(0o622)
        else:
            os.chown(folder, SANDBOX_UID, SANDBOX_UID)
            if forgery == "records of uid 65534":
                os.chown(folder, 0, 0)
                for name in NAMES:
                    os.chown(folder / name, SANDBOX_UID, SANDBOX_UID)
    assert _readers(folder) == dict.fromkeys(_readers(folder), None)


def test_a_record_may_name_only_its_own_folders_cgroup(shared_tmp: Path) -> None:
    """However it got there, a `cgroup` record naming any cgroup but its folder's own is no record."""
    folder = shared_tmp / f"{host_dir.PREFIX}mine"
    folder.mkdir(mode=0o700)
    root = Path("/sys/fs/cgroup/memory")
    others = (root / "coderoom-coderoom-local-other", root / "x" / cgroup.name_for(folder) / "..", root / "system.slice")
    for named in others:
        records.write(folder, host_dir.CGROUP_FILE, os.fsencode(named), replace=True)
        assert cgroup.recorded(folder / host_dir.CGROUP_FILE) is None, named
    records.write(folder, host_dir.CGROUP_FILE, os.fsencode(root / "x" / cgroup.name_for(folder)), replace=True)
    assert cgroup.recorded(folder / host_dir.CGROUP_FILE) == root / "x" / cgroup.name_for(folder)


def test_the_sandbox_uid_removing_its_own_locked_tree_needs_no_chmod_by_name(shared_tmp: Path) -> None:
    """Without root (as the sandbox uid, the case of a non-root host), directories the sandbox made
    unreadable (mode 000) are opened through an O_PATH fd and fixed through that fd."""
    arena = shared_tmp / "arena"
    arena.mkdir()
    os.chown(arena, SANDBOX_UID, SANDBOX_UID)

    def lock_and_remove() -> None:
        locked = arena / "tree" / "a" / "b"
        locked.mkdir(parents=True)
        (locked / "file").write_text("x")
        for folder in (locked, locked.parent, locked.parent.parent):
            folder.chmod(0)
        tree.remove_tree(arena / "tree")
        (arena / "done").touch()

    with _forked(lock_and_remove):
        deadline = time.monotonic() + 10
        while not (arena / "done").exists():
            assert time.monotonic() < deadline, "the sandbox uid could not remove its own tree"
            time.sleep(0.01)
    assert not (arena / "tree").exists()


@pytest.mark.parametrize("lease", ['{"boot": "b", "pid": Infinity, "start": 0}', "[" * 4000, '{"pid": [1]}', "\xff\xfe"])
def test_a_lease_that_does_not_parse_is_no_lease(lease: str, shared_tmp: Path) -> None:
    """A lease is data even in our own folder: an infinite pid (OverflowError in int()) and nesting
    past the recursion limit raised out of `read_lease` before, ending `prune` with a traceback;
    each of these is now no lease."""
    from coderoom.sandboxes.leases import read_lease

    folder = shared_tmp / "folder"
    folder.mkdir(mode=0o700)
    records.write(folder, LEASE_FILE, lease.encode("utf-8", "surrogateescape"))
    assert read_lease(folder) is None


def test_prune_kills_only_the_sandbox_side_of_the_processes_that_name_a_folder() -> None:
    """A path in a command line is anyone's to write: as root, a host process of the sandbox's
    uid outside any sandbox (a `nobody` daemon) and one of root's own (the user's viewer) are
    both spared; what runs as that uid in a pid namespace of its own (as a sandbox does) is killed."""
    from coderoom.sandboxes.local import leases

    if os.geteuid() != 0:
        pytest.skip("as root, the sandbox's uid is not the user's")
    folder = host_dir.make()
    log = f"{folder}/workspace/log.txt"
    nested = ["unshare", "--pid", "--fork", "sh", "-c", "sleep 60", "sandboxed", log]
    spared = [
        subprocess.Popen(["sh", "-c", "sleep 60", "viewer", log]),
        subprocess.Popen(["sh", "-c", "sleep 60", "nobody", log], preexec_fn=_as_sandbox_uid),
    ]
    # unshare needs CAP_SYS_ADMIN, so the namespace is made as root and its child drops to the uid
    inside = subprocess.Popen([*nested[:3], "setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
                               "--clear-groups", *nested[3:]])  # fmt: skip
    try:
        time.sleep(0.3)
        leases.kill_users(folder, None, None)
        assert [process.poll() for process in spared] == [None, None], "a host process was killed"
        inside.wait(timeout=10)  # unshare ends once its child, the sandbox-side sleep, was killed
    finally:
        for process in [*spared, inside]:
            process.kill()
            process.wait()
        tree.remove_tree(folder)
