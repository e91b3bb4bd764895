"""Local sandbox's faster start attack pass (attackls, 2026-12-07), the sandbox's own root:
L-S1, L-S2, L-S7.

The sandbox's /etc, its venv skeleton (pyvenv.cfg and the interpreter links, made only when the
host's Python is a venv) and the launcher's own files (launcher.pyc, seccomp.bpf,
launcher.settings) are files bwrap writes with --file into its root, a tmpfs made read-only before
the launcher starts (issue 25); the merged-/usr links (/bin -> usr/bin) stand there too. They
belong to the sandbox user, the uid every command runs as, so their modes are no guard: the
read-only mount is. No command may change them for the next one by any path, and nothing bwrap
was handed for them may reach a process of the sandbox."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import pytest
from backends import require_backend
from sandbox import test_local_launcher_slots as slots

from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.local import bwrap, spawn
from coderoom.sandboxes.session import open_session


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


_ROOT_FILES = (
    "/etc/passwd", "/etc/group", "/etc/hosts", "/opt/coderoom/venv/pyvenv.cfg",
    "/opt/coderoom/launcher.pyc", "/opt/coderoom/seccomp.bpf", "/opt/coderoom/launcher.settings",
)  # fmt: skip
_ROOT_DIRS = ("/", "/etc", "/opt", "/opt/coderoom", "/opt/coderoom/venv", "/opt/coderoom/venv/bin")
# the venv skeleton is there only when the host's Python is a venv (`bwrap.root_files`)
_HAS_VENV = bool(bwrap.runtime().venv_sites)
ROOT_FILES = tuple(path for path in _ROOT_FILES if _HAS_VENV or "/venv" not in path)
ROOT_DIRS = tuple(path for path in _ROOT_DIRS if _HAS_VENV or "/venv" not in path)
# the links bwrap makes in its root, and where each leads: the venv's python3 (with a venv) and
# the merged-/usr links of a host that has them (`bwrap.build_args`)
ROOT_LINKS = {
    **({f"{bwrap.VENV_MOUNT}/bin/python3": bwrap.runtime().sandbox_interpreter} if _HAS_VENV else {}),
    **{f"/{name}": os.readlink(f"/{name}") for name in ("bin", "sbin", "lib", "lib64") if os.path.islink(f"/{name}")},
}

# every way a command of the owning uid might change a root file or folder: each prints the
# errno's name, or DONE; then the root mount's options
TAMPER = r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
files, dirs, links = (sys.argv[index].split(",") for index in (1, 2, 3))
def attempt(name, action):
    try:
        action()
        print("DONE", name)
    except OSError as exc:
        print(errno.errorcode.get(exc.errno, exc.errno), name)
def checked(result):
    if result != 0:
        raise OSError(ctypes.get_errno(), "")
def reopen(path, how, mode):  # through /proc/self/fd: a new open of the same file, not its mount
    fd = os.open(path, how)
    try:
        os.close(os.open(f"/proc/self/fd/{fd}", mode))
    finally:
        os.close(fd)
open("decoy", "w").close()
for path in files:
    attempt(f"append {path}", lambda: os.close(os.open(path, os.O_WRONLY | os.O_APPEND)))
    attempt(f"reopen-rdonly {path}", lambda: reopen(path, os.O_RDONLY, os.O_RDWR))
    attempt(f"reopen-opath {path}", lambda: reopen(path, os.O_PATH, os.O_WRONLY))
    attempt(f"chmod {path}", lambda: os.chmod(path, 0o666))
    attempt(f"chown {path}", lambda: os.chown(path, os.getuid(), os.getgid()))
    attempt(f"utime {path}", lambda: os.utime(path, (0, 0)))
    attempt(f"truncate {path}", lambda: os.truncate(path, 0))
    attempt(f"setxattr {path}", lambda: checked(libc.setxattr(path.encode(), b"user.cr", b"x", 1, 0)))
    attempt(f"rename {path}", lambda: os.rename(path, path + ".old"))
    attempt(f"unlink {path}", lambda: os.unlink(path))
    attempt(f"link-out {path}", lambda: os.link(path, "linked"))
    attempt(f"replace-in {path}", lambda: os.replace("decoy", path))
for path in dirs:
    attempt(f"mkdir {path}", lambda: os.mkdir(path + "/cr-new"))
    attempt(f"symlink {path}", lambda: os.symlink("/workspace/decoy", path + "/cr-link"))
    attempt(f"mkfifo {path}", lambda: os.mkfifo(path + "/cr-fifo"))
    attempt(f"chmod {path}", lambda: os.chmod(path, 0o777))
    if path != "/":
        attempt(f"rename {path}", lambda: os.rename(path, path + "-old"))
for path in links:
    attempt(f"unlink {path}", lambda: os.unlink(path))
attempt("remount / read-write", lambda: checked(libc.mount(None, b"/", None, 0x20 | 0x1000, None)))
attempt("mount a tmpfs over /etc", lambda: checked(libc.mount(b"t", b"/etc", b"tmpfs", 0, None)))
print("root", [line.split()[5] for line in open("/proc/self/mountinfo") if line.split()[4] == "/"])
"""
# what the next command reads of the same files, and where the links lead
READ_BACK = (
    "import hashlib, os, sys; [print(p, os.readlink(p)) for p in sys.argv[2].split(',')]; "
    "[print(p, oct(os.stat(p).st_mode), hashlib.sha256(open(p, 'rb').read()).hexdigest()) for p in sys.argv[1].split(',')]"
)


async def test_l_s1_no_command_changes_the_root_s_files_for_the_next_by_any_path() -> None:
    files, dirs, links = ",".join(ROOT_FILES), ",".join(ROOT_DIRS), ",".join(ROOT_LINKS)
    assert ROOT_LINKS, "no link in the root to tamper with"
    async with open_session(SandboxSpec(backend="local")) as session:
        before = await session.exec("python3", "-c", READ_BACK, files, links, shell=False)
        tried = await session.exec("python3", "-c", TAMPER, files, dirs, links, shell=False)
        after = await session.exec("python3", "-c", READ_BACK, files, links, shell=False)
    lines = tried.stdout.decode().splitlines()
    expected = 12 * len(ROOT_FILES) + 5 * len(ROOT_DIRS) - 1 + len(ROOT_LINKS) + 3
    assert tried.exit_code == 0 and len(lines) == expected, tried.stderr
    assert [line for line in lines if line.startswith("DONE")] == []
    # the owner's own changes stop at the mount, not at the mode
    changes = [line for line in lines if line.split()[1] in ("chmod", "chown", "utime", "setxattr", "rename", "unlink")]
    assert {line.split()[0] for line in changes} == {"EROFS"}, changes
    assert {line.split()[0] for line in lines if line.split()[1] == "mkdir"} == {"EROFS"}
    assert lines[-1].startswith("root ['ro,"), lines[-1]
    assert before.exit_code == 0 and before.stdout == after.stdout, (before.stdout, after.stdout)
    read_links = before.stdout.decode().splitlines()[: len(ROOT_LINKS)]
    assert read_links == [f"{path} {target}" for path, target in ROOT_LINKS.items()], before.stdout


def launcher_tree(launcher: int) -> list[int]:
    """The launcher and every process under it: its preparer, the slots' inits and stubs."""
    found, todo = [], [launcher]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += slots.children(pid)
    return found


def open_files(pid: int) -> dict[int, str]:
    folder = Path(f"/proc/{pid}/fd")
    return {int(fd): os.readlink(folder / fd) for fd in os.listdir(folder)}


def settled_files(launcher: int) -> dict[int, dict[int, str]]:
    """Every process under the launcher and its open files, read once the tree holds still (two
    reads alike): a command's init reports its exit before it exits, so right after a command
    its fds, or the process itself, may go while they are read."""
    deadline = time.monotonic() + 10
    last: dict[int, dict[int, str]] | None = None
    while True:
        try:
            tree: dict[int, dict[int, str]] | None = {pid: open_files(pid) for pid in launcher_tree(launcher)}
        except OSError:  # a process or one of its fds went while read
            tree = None
        if tree is not None and tree == last:
            return tree
        assert time.monotonic() < deadline, "the launcher's tree never held still"
        last = tree
        time.sleep(0.05)


FDS = "import os; print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))"


async def test_l_s2_a_host_with_many_files_open_hands_no_sandbox_process_a_root_file_s_fd() -> None:
    """The files bwrap copies into the root come as memfds numbered like the host's own fds, which
    a busy host (a server with many sessions) numbers above 512, the sandbox's RLIMIT_NOFILE and
    so the top of the stub's closerange: bwrap must have closed them, and the stub every other
    fd, whatever its number."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2048:
        pytest.skip("needs 2048 open files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(1100)]  # past select's 1024
    try:
        async with open_session(SandboxSpec(backend="local")) as session:
            first = await session.exec("python3", "-c", FDS, shell=False)
            launcher = await slots.launcher_pid(session)
            tree = settled_files(launcher)
            second = await session.exec("python3", "-c", FDS, shell=False)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert first.stdout == second.stdout == b"[0, 1, 2, 3]\n", (first.stdout, second.stdout)
    assert len(tree) >= 4, tree  # the launcher, its preparer, the ready slot's init and stub
    kinds = {target.split(":")[0] for files in tree.values() for target in files.values()}
    assert kinds <= {"/dev/null", "pipe", "socket", "mnt", "anon_inode"}, kinds
    assert not [target for files in tree.values() for target in files.values() if "memfd" in target]
    high = {pid: [fd for fd in files if fd >= 512] for pid, files in tree.items()}
    assert set(map(tuple, high.values())) == {()}, high  # the launcher's control socket moved low too


async def test_l_s7_the_root_s_files_name_nothing_of_the_host() -> None:
    """What any command may read of the sandbox's own root: /etc, the venv skeleton and the
    launcher's program and settings hold no host path (its Python, this checkout, the session
    folder), so they tell the payload nothing the host keeps to itself."""
    dump = "import sys; [sys.stdout.buffer.write(open(p, 'rb').read()) for p in sys.argv[1].split(',')]"
    async with open_session(SandboxSpec(backend="local")) as session:
        folder = str(session._inner.sandbox.host_dir)
        read = await session.exec("python3", "-c", dump, ",".join(ROOT_FILES), shell=False)
    assert read.exit_code == 0 and b"sandbox:x:1000" in read.stdout, read.stderr
    host = {folder, sys.prefix, sys.base_prefix, str(spawn.LAUNCHER_SOURCE.parent), str(Path.cwd())}
    assert [path for path in host if path.encode() in read.stdout] == []
