"""Service boundary pass (attacksvc, 2026-12-02): `coderoom mcp --allow-read DIR` (SVC-M*).

SVC-M1: the roots are resolved at start but re-opened by path on every read, so a component
above a root (a folder another user, here uid 65534, may write) swapped for a symlink after the
server started moves the root: the next `open_session` reads a root-only canary outside every
allowed folder. The held attempts (symlinks, `..`, FIFOs, devices, races inside the root) are in
test_mcp.py and docs/security.md."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from coderoom.errors import RequestRefused, UsageError
from coderoom.mcp_server.policy import ReadPolicy
from conftest import stdio_server
from test_mcp import text_of

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def layout() -> Iterator[Path]:
    """/tmp/x/g (uid 65534's) /p/root (the allowed folder, root's), and /tmp/x/outside/root/ok.txt:
    a root-only canary outside it. In /tmp, not tmp_path: uid 65534 must reach g."""
    top = Path(tempfile.mkdtemp(prefix="attacksvc-", dir="/tmp"))
    top.chmod(0o755)
    allowed = top / "g" / "p" / "root"
    allowed.mkdir(parents=True)
    (allowed / "ok.txt").write_text("allowed")
    os.chown(top / "g", 65534, 65534)
    outside = top / "outside" / "root"
    outside.mkdir(parents=True)
    (outside / "ok.txt").write_text("CANARY-OUTSIDE-ALLOWED")
    (outside / "ok.txt").chmod(0o600)
    (top / "outside").chmod(0o700)
    try:
        yield top
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=False)


def swap_parent_for_link(top: Path) -> None:
    """As uid 65534 (owner of g only): g/p becomes a symlink to top/outside."""
    subprocess.run([*NOBODY, "sh", "-c", f"mv {top}/g/p {top}/g/p.old && ln -s {top}/outside {top}/g/p"], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as uid 65534")
def test_a_parent_of_an_allowed_root_swapped_for_a_link_moves_no_read_outside(layout: Path) -> None:
    policy = ReadPolicy([layout / "g" / "p" / "root"])
    assert policy.read("ok.txt", 100) == b"allowed"
    swap_parent_for_link(layout)
    try:
        data = policy.read("ok.txt", 100)
    except RequestRefused:
        return
    assert b"CANARY" not in data


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as uid 65534")
async def test_open_session_reads_nothing_outside_after_a_parent_is_swapped(layout: Path, tmp_path: Path) -> None:
    params = stdio_server("--allow-read", str(layout / "g" / "p" / "root"), "--runs", str(tmp_path / "runs"))
    async with Client(params) as client:
        swap_parent_for_link(layout)
        opened = await client.call_tool("open_session", {"files": {"input/ok.txt": "ok.txt"}})
        if opened.is_error:
            return
        sid = text_of(opened).split("session_id: ", 1)[1].split()[0]
        read = await client.call_tool("read_file", {"session_id": sid, "path": "input/ok.txt"})
        await client.call_tool("close_session", {"session_id": sid})
    assert "CANARY" not in text_of(read)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_root_is_held_open_until_close_and_read_as_it_was_at_start(tmp_path: Path) -> None:
    """The fix for SVC-M1: the folder opened at start is the one read, whatever its path becomes;
    `close()` (the server's shutdown) gives every fd back and reads nothing after."""
    before = open_fds()
    allowed = tmp_path / "root"
    allowed.mkdir()
    (allowed / "ok.txt").write_text("allowed")
    policy = ReadPolicy([allowed])
    assert len(open_fds() - before) == 1
    allowed.rename(tmp_path / "moved")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "ok.txt").write_text("CANARY")
    (tmp_path / "root").symlink_to(tmp_path / "elsewhere")
    assert policy.read("ok.txt", 100) == b"allowed"
    assert policy.read(str(allowed / "ok.txt"), 100) == b"allowed"
    policy.close()
    assert open_fds() == before
    with pytest.raises(RequestRefused):
        policy.read("ok.txt", 100)


def test_a_root_that_cannot_be_opened_leaves_no_fd_behind(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "dir").mkdir()
    before = open_fds()
    with pytest.raises(UsageError, match="not a folder"):
        ReadPolicy([tmp_path / "dir", tmp_path / "file"])
    assert open_fds() == before
