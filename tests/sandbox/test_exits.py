"""End to end with a real local sandbox: the sandbox writes every planted form (a `.git` folder
and FILE, bare and split repositories, a worktree's `gitdir`, `.hg`, `.envrc`, `.vscode/`, a
FIFO, links out, a forged left-out list), and no exit hands one to the host: copy-back, a live
session's page and MCP reads, the outputs saved when the session closes, and `export`/`rerun`
on the run folder it leaves. Git is never run on what the sandbox wrote: structure is checked."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from backends import require_backend
from coderoom import Session
from coderoom.errors import RequestRefused
from coderoom.export.rerun import archived_inputs
from coderoom.export.steps import WorkspaceImages
from coderoom.hostile.exits import LEFT_OUT_NOTE
from coderoom.mcp_server.tools import read_session_file
from coderoom.sandboxes.limits import Limits
from coderoom.sandboxes.oneshot import run_once
from coderoom.sandboxes.spec import SandboxSpec
from coderoom.web import files as web_files
from support.planted import GIT_CONFIGS, IMAGES, REFUSED, leaked, plant_script


@pytest.fixture(autouse=True)
def _local() -> None:
    require_backend("local")


@pytest.mark.parametrize("everything", [False, True], ids=["default", "copy-back-all"])
async def test_copy_back_keeps_every_planted_form_in(tmp_path: Path, everything: bool) -> None:
    spec = SandboxSpec(backend="local", limits=Limits())
    done = await run_once(spec, ["sh", "-c", plant_script("w")], tmp_path, copy_back_all=everything)
    assert done.exit_code == 0, done.stderr
    assert (tmp_path / "w/kept.csv").is_file() and (tmp_path / "w/src/app/main.py").is_file()
    note = (tmp_path / LEFT_OUT_NOTE).read_text()
    if everything:  # the deliberate override: hooks and repositories come back, links and FIFOs never
        assert sorted(leaked(tmp_path, "w")) == sorted(set(REFUSED) - {"escape", "climb", "pipe", LEFT_OUT_NOTE})
    else:
        assert leaked(tmp_path, "w") == []
        for name in ("w/.git", "w/pointer/.git", "w/lib1/config", "w/src/HEAD", "w/lib/config", "w/wt/gitdir"):
            assert f"\n{name}: " in note, name
    assert "w/escape: " in note and "nothing was left out" not in note  # (the archive never holds a FIFO)


async def test_a_live_session_and_its_run_folder_let_no_planted_form_out(tmp_path: Path) -> None:
    session = await Session.open(model="offline", sandbox="local", runs_dir=tmp_path / "runs")
    try:
        planted = await session.exec(plant_script("output"))
        assert planted.exit_code == 0, planted.stderr
        source = web_files.SessionFiles(session)
        listed = await web_files.listing(source)
        paths = {f["path"] for f in listed["files"]}
        assert "output/kept.csv" in paths and [n for n in REFUSED if f"output/{n}" in paths] == []
        assert {"output/.git", "output/src/HEAD", "output/lib/config"} <= {f["path"] for f in listed["left_out"]}
        for name in REFUSED:
            with pytest.raises(RequestRefused):
                await web_files.download(source, PurePosixPath(f"output/{name}"), inline=False)
            with pytest.raises(RequestRefused):
                await read_session_file(session, f"output/{name}")
        for name in GIT_CONFIGS:  # the file itself is there to read: the policy is what stops it
            assert await session.read_file(f"output/{name}")
        reply = await web_files.zipped(source, "live")
        with zipfile.ZipFile(io.BytesIO(b"".join([chunk async for chunk in reply.body_iterator]))) as archive:
            names = archive.namelist()
        assert "output/kept.csv" in names and [n for n in REFUSED if f"output/{n}" in names] == []
        assert await read_session_file(session, "output/kept.csv") == b"a,b\n1,2\n"
    finally:
        run_dir = await session.close()
    assert leaked(run_dir, "output") == []  # the outputs saved at close
    assert (run_dir / "output/kept.csv").is_file() and (run_dir / "output/src/app/main.py").is_file()
    assert "output/src/commondir: " in (run_dir / LEFT_OUT_NOTE).read_text()
    images = WorkspaceImages(run_dir)
    try:
        assert images.png("output/plot.png") is not None
        assert [name for name in IMAGES if images.png(f"output/{name}") is not None] == []
    finally:
        images.close()
    _, left_out = archived_inputs(run_dir, ["output"], tmp_path / "restored", 10**8)
    assert leaked(tmp_path / "restored", "output") == [] and left_out
