"""Attack pass R-F on `sandboxes.pruning.remove_held` through its two callers (the Ray workers'
runs folders, `cluster.node_folders`, and the local session folders, `local.host_dir`): what a
killed run or a hostile leftover can put in the prune's way. Nothing outside the folder goes,
a folder a recovery holds never goes, and every "left in place" line is escaped and bounded."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from coderoom.cluster import node_folders
from coderoom.hostile import tree
from coderoom.sandboxes import pruning, records, recovering
from coderoom.sandboxes.docker import bindings, egress
from coderoom.sandboxes.leases import LEASE_FILE

DEAD_OWNER = {"boot": "a boot long gone", "pid": 2, "start": 0, "pidns": 0}  # what a crashed process leaves



def _dead(folder: Path) -> Path:
    records.write(folder, LEASE_FILE, json.dumps(DEAD_OWNER).encode(), replace=True)
    return folder


def test_r_f1_links_in_a_dead_workers_folder_are_removed_as_links_never_followed(temp: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    host = tmp_path_factory.mktemp("host")  # a host folder and a live worker's folder the links name
    (host / "canary").write_text("R-F1 canary")
    live = node_folders.make()
    (live / "run-1").mkdir()
    dead = _dead(node_folders.make())
    (dead / "run-1").symlink_to(live / "run-1")  # looks like a run folder to `_runs`, held by no one
    (dead / "host").symlink_to(host)
    (dead / "file-link").symlink_to(host / "canary")
    assert node_folders.prune() == 1
    assert not dead.exists()
    assert (host / "canary").read_text() == "R-F1 canary" and (live / "run-1").is_dir()


def test_r_f1_a_link_named_as_a_workers_folder_is_no_folder_of_ours(temp: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    host = _dead(tmp_path_factory.mktemp("host"))  # even with a dead lease in the folder it names
    (host / "canary").write_text("R-F1 canary")
    (temp / f"{node_folders.PREFIX}planted").symlink_to(host)
    assert node_folders.prune() == 0
    assert (host / "canary").read_text() == "R-F1 canary"


def test_r_f2_a_lease_planted_in_a_live_workers_folder_does_not_make_it_dead(temp: Path) -> None:
    live = node_folders.make()  # this process's: its lease names a live owner
    (live / "run-1").mkdir()
    (live / "run-1" / LEASE_FILE).write_text(json.dumps(DEAD_OWNER))  # a dead lease one level down
    assert node_folders.prune() == 0 and (live / "run-1").is_dir()


def test_r_f3_a_hostile_name_and_reason_make_one_escaped_bounded_line(temp: Path) -> None:
    folder = temp / ("run\n\x1b]0;pwned\x07\u202e" + "x" * 200)
    folder.mkdir()

    def refuse(_: Path) -> None:
        raise OSError("\r\x1b[2Kall clean\n" * 1000)

    skipped: list[str] = []
    assert not pruning.remove_held(folder, refuse, skipped)
    [line] = skipped
    assert line.isprintable() and len(line) < 500  # no newline, ESC, BEL or bidi control, whatever the name
    assert "\\n" in line and "\\x1b" in line and "\\u202e" in line


def test_r_f4_a_folder_gone_before_the_prune_reaches_it_costs_nothing(temp: Path) -> None:
    gone = _dead(node_folders.make())
    kept = _dead(node_folders.make())
    skipped: list[str] = []
    real = node_folders._runs

    def racing(folder: Path) -> list[Path]:  # another prune removes `gone` between listing and holding
        if folder == gone:
            tree.remove_tree(gone)
            return []
        return real(folder)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(node_folders, "_runs", racing)
        node_folders.prune(skipped)
    assert skipped == [] and not gone.exists() and not kept.exists()


def test_r_f5_a_deep_read_only_tree_is_removed(temp: Path) -> None:
    dead = _dead(node_folders.make())
    deep = dead / "run-1"
    deep.mkdir()
    for _ in range(1200):  # deeper than recursion and MAX_DEPTH: remove_tree flattens it
        deep = deep / "d"
        deep.mkdir()
    for parent in list(deep.parents)[:5]:
        parent.chmod(0o500)
    assert node_folders.prune() == 1 and not dead.exists()


_PRUNE_OUT_OF_DESCRIPTORS = textwrap.dedent(
    """
    import resource, sys, tempfile
    tempfile.tempdir = sys.argv[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from coderoom.cluster import node_folders
    skipped = []
    print(node_folders.prune(skipped), len(skipped), *skipped, sep="\\n")
    """
)


def test_r_f6_a_prune_out_of_descriptors_never_takes_a_run_folder_a_recovery_holds(temp: Path) -> None:
    dead = _dead(node_folders.make())  # a dead session actor's folder of many runs (a long session)
    for index in range(100):
        (dead / f"run-{index:03}").mkdir()
    saving = dead / "run-099"  # sorted last: its open comes after the descriptors ran out
    with recovering.held(saving) as mine:  # a recovery saving into it now
        assert mine
        out = subprocess.run(
            [sys.executable, "-c", _PRUNE_OUT_OF_DESCRIPTORS, str(temp)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        removed, count, line = out.stdout.splitlines()
        assert (removed, count) == ("0", "1")  # left in place and named, not removed
        assert "cannot tell whether another coderoom process is recovering it" in line and "Too many open files" in line
        assert saving.is_dir()
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 64  # the limit was the child's alone
    assert os.path.isdir(dead)


_HOLD_WITH_NO_DESCRIPTOR_LEFT = textwrap.dedent(
    """
    import asyncio, json, os, resource, sys
    from pathlib import Path
    from coderoom.recovery import recover
    from coderoom.sandboxes import pruning
    from coderoom.sandboxes.orphans import Orphan
    from coderoom.sandboxes.spec import SandboxSpec
    folder = Path(sys.argv[1])

    def never(**_):
        raise AssertionError("reopened a workspace it could not tell free")

    class OneOrphan:
        name = "local"
        def unavailable_reason(self, spec): return None
        def abandoned_runs(self, spec): return [Orphan(folder, folder, "run-1", never)]

    loop = asyncio.new_event_loop()  # its own descriptors made while there are some
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    spent = []
    while True:
        try:
            spent.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            break
    skipped = []
    removed = pruning.remove_held(folder, Path.rmdir, skipped)  # rmdir needs no descriptor: only the hold stops it
    [recovery] = loop.run_until_complete(recover(SandboxSpec(), backend=OneOrphan()))
    for fd in spent:
        os.close(fd)
    print(json.dumps({"removed": removed, "skipped": skipped, "recovery": recovery.problem}))
    """
)


def test_r_f6_a_hold_that_cannot_be_told_for_want_of_descriptors_is_read_as_held(tmp_path: Path) -> None:
    folder = tmp_path / "saving"  # an empty folder a recovery holds: removing it takes no descriptor
    folder.mkdir()
    with recovering.held(folder) as mine:
        assert mine
        out = subprocess.run(
            [sys.executable, "-c", _HOLD_WITH_NO_DESCRIPTOR_LEFT, str(folder)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        seen = json.loads(out.stdout)
        assert folder.is_dir() and seen["removed"] is False  # the prune left it
        [line] = seen["skipped"]  # and said why
        assert line.startswith(f"'{folder}' left in place: CannotTell: ") and "Too many open files" in line
        assert "cannot tell" in seen["recovery"] and "Too many open files" in seen["recovery"]  # nor recovered


def test_a_folder_that_is_not_there_to_hold_is_nobodys(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "link").symlink_to(tmp_path)
    for gone in ["missing", "file", "link", "file/below"]:  # ENOENT, ENOTDIR, ELOOP, ENOTDIR: no holder can open them either
        with recovering.held(tmp_path / gone) as mine:
            assert mine


_PRUNE_WITH_A_BIND_MOUNT = textwrap.dedent(
    """
    import subprocess, sys, tempfile
    from pathlib import Path
    import importlib
    temp, host, where, module = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    tempfile.tempdir = str(temp)
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)  # this namespace's alone
    subprocess.run(["mount", "--bind", host, where], check=True)
    skipped = []
    print(importlib.import_module(module).prune(skipped), len(skipped))
    """
)


@pytest.mark.parametrize("where", ["run-1", "."])
def test_r_f11_a_bind_mount_left_in_a_dead_workers_folder_or_as_it_never_has_the_host_folder_it_shows_emptied(
    temp: Path, tmp_path_factory: pytest.TempPathFactory, where: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount (in a mount namespace of its own)")
    host = _dead(tmp_path_factory.mktemp("host"))  # a dead lease in it too: as the folder itself, it looks abandoned
    (host / "canary").write_text("R-F11 canary")
    (host / "sub").mkdir()
    host.chmod(0o755)
    dead = _dead(node_folders.make())
    (dead / "run-1").mkdir()
    out = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", _PRUNE_WITH_A_BIND_MOUNT, str(temp), str(host), str(dead / where),
         "coderoom.cluster.node_folders"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1"]  # left in place, named
    assert (host / "canary").read_text() == "R-F11 canary" and (host / "sub").is_dir()
    assert stat.S_IMODE(host.stat().st_mode) == 0o755 and dead.is_dir()  # not even its mode changed


CONTAINER = "0123456789abcdef" * 4


def _dead_binding(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "run-1"
    run_dir.mkdir()
    return _dead(bindings.bind(None, CONTAINER, run_dir, "r1", "/workspace"))


def test_r_f13_the_docker_backends_prunes_go_through_remove_held_too(
    temp: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    binding, socket_folder = _dead_binding(tmp_path_factory), _dead(egress.make(65534))
    seen: list[Path] = []
    real = pruning.remove_held

    def through(folder: Path, *args: object, **kwargs: object) -> bool:
        seen.append(folder)
        return real(folder, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pruning, "remove_held", through)
    assert bindings.prune() == 1 and seen == [binding]
    assert egress.prune() == 1 and seen == [binding, socket_folder]
    assert not binding.exists() and not socket_folder.exists()


def test_r_f13_a_bind_mount_left_in_a_dead_docker_binding_never_has_the_host_folder_it_shows_emptied(
    temp: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount (in a mount namespace of its own)")
    host = tmp_path_factory.mktemp("host")
    (host / "canary").write_text("R-F13 canary")
    binding = _dead_binding(tmp_path_factory)
    (binding / "mnt").mkdir()
    out = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", _PRUNE_WITH_A_BIND_MOUNT, str(temp), str(host), str(binding / "mnt"),
         "coderoom.sandboxes.docker.bindings"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1"]  # left in place and named (shutil.rmtree emptied the host folder, said nothing)
    assert (host / "canary").read_text() == "R-F13 canary" and binding.is_dir()
