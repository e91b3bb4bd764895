"""The exit policy, written as the attacks: every planted form (a `.git` folder and FILE, a bare
repository under another name, one split across folders by `commondir`, a worktree's `gitdir`,
`.hg`, `.envrc`, `.vscode/`, a FIFO, a device, links out of the tree, a forged left-out list) is
kept in by the one function, at every exit that has no sandbox of its own here (a forged run
folder in the page and MCP, `export`'s images, `rerun`'s restore, run outputs from a tar); and
every exit module goes through `hostile.exits`, which nothing else reimplements."""

from __future__ import annotations

import ast
import asyncio
import io
import re
import threading
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from coderoom import artifacts
from coderoom.errors import RequestRefused
from coderoom.export.rerun import archived_inputs
from coderoom.export.steps import WorkspaceImages
from coderoom.hostile.exits import (
    GIT_DIR_REASON,
    HOOK_REASON,
    LEFT_OUT_NOTE,
    ExitEntry,
    exit_policy,
    extract_leaving_out,
    tar_entries,
)
from coderoom.mcp_server.tools import read_run_file
from coderoom.web import files as web_files
from core.test_layout import MODULES, PACKAGE, imported_modules
from support.planted import FILES, GIT_CONFIGS, IMAGES, KEPT, REFUSED, leaked, plant_on_disk, planted_tar


def _refused_names(base: str = "") -> set[str]:
    policy = exit_policy(tar_entries(planted_tar(base)))
    prefix = f"{base}/" if base else ""
    return {name for name in [*REFUSED, "null", *KEPT] if policy.refusal(prefix + name) is not None}


@pytest.mark.parametrize("base", ["", "deep/er"])
def test_every_planted_form_is_refused_and_ordinary_files_are_not(base: str) -> None:
    assert _refused_names(base) == {*REFUSED, "null"}


@pytest.mark.parametrize(("entries", "name"), [
    ([("d/HEAD", "file"), ("d/objects", "dir"), ("d/refs", "dir"), ("d/config", "file")], "d/config"),  # bare
    ([("src/HEAD", "file"), ("src/commondir", "file"), ("src/app/x.py", "file")], "src/HEAD"),  # half of a split
    ([("lib/objects", "dir"), ("lib/refs", "dir"), ("lib/config", "file")], "lib/config"),  # what commondir names
    ([("w/HEAD", "file"), ("w/gitdir", "file"), ("w/config.worktree", "file")], "w/config.worktree"),  # worktree
    ([("x/.git", "file")], "x/.git"),  # a gitdir: pointer
    ([("x/.GIT/Config", "file")], "x/.GIT/Config"),  # a case-insensitive host file system
    ([("D/head", "file"), ("D/Objects", "dir"), ("D/CONFIG", "file")], "D/CONFIG"),
], ids=["bare", "commondir", "common-dir-target", "worktree", "git-file", "case", "case-bare"])  # fmt: skip
def test_git_finds_these_repositories_and_so_does_the_policy(entries: list[tuple[str, str]], name: str) -> None:
    policy = exit_policy(ExitEntry(n, k) for n, k in entries)
    assert policy.refusal(name) in (GIT_DIR_REASON, HOOK_REASON)
    assert policy.refusal("src/app/x.py") is None  # a folder's other files are not git's


NFD_E = "e\u0301"  # é as macOS writes it; "\u00e9" is the NFC spelling


@pytest.mark.parametrize(("entries", "name"), [
    ([(f"r{NFD_E}po/HEAD", "file"), ("r\u00e9po/objects", "dir"), ("R\u00c9PO/config", "file")], "R\u00c9PO/config"),
    ([("d./HEAD", "file"), ("d /objects", "dir"), ("D/config", "file")], "D/config"),  # Windows trims
    ([("d/HEAD.", "file"), ("d/Objects ", "dir"), ("d/config.", "file")], "d/config."),
    ([("a/B/HEAD", "file"), ("A/b/refs", "dir"), ("a/b/config", "file")], "a/b/config"),  # parents merge too
], ids=["nfc-nfd-case", "trailing-dot-space-folder", "trailing-dot-space-entry", "parent-spellings"])  # fmt: skip
def test_a_repository_spelled_as_a_host_merges_names_is_one_repository(entries: list[tuple[str, str]], name: str) -> None:
    policy = exit_policy(ExitEntry(n, k) for n, k in entries)
    assert [n for n, _ in entries if policy.refusal(n) is None] == []
    assert policy.refusal(name) == GIT_DIR_REASON


@pytest.mark.parametrize("name", [
    ".Rprofile", ".RPROFILE", ".Renviron", ".RData", ".gdbinit", ".lldbinit", ".iex.exs", ".ocamlinit",
    ".perldb", "mise.ci.toml", ".mise.dev.toml", ".mise/anything", "sub/mise/tasks/build", ".rtx.local.toml",
    ".git.", ".git /config", ".envrc.", "Sitecustomize.PY", ".Vscode/tasks.json",
    "GIT~1/config", "git~2/hooks/pre-commit", ".g\u200cit/config", ".\ufeffgit/HEAD", ".env\u200drc",
])  # fmt: skip
def test_hooks_are_matched_as_the_host_compares_names(name: str) -> None:
    assert exit_policy([ExitEntry(name, "file")]).refusal(name) == HOOK_REASON


@pytest.mark.parametrize("name", [
    "readline_helpers.py", "mise.toml.bak", "notes/premise.md", "data.rds", "gdbinit.txt", "git~x/config", "agit~1/f",
])  # fmt: skip
def test_names_that_only_resemble_a_hook_leave(name: str) -> None:
    assert exit_policy([ExitEntry(name, "file")]).refusal(name) is None


def test_coderoom_s_list_cannot_be_forged_under_another_spelling() -> None:
    for name in (LEFT_OUT_NOTE.upper(), LEFT_OUT_NOTE + ".", f"out/{LEFT_OUT_NOTE} "):
        assert exit_policy([ExitEntry(name, "file")]).refusal(name) is not None, name


def test_the_override_lets_hooks_out_but_never_devices_links_or_unsafe_names() -> None:
    policy = exit_policy(tar_entries(planted_tar()), everything=True)
    assert [n for n in [*FILES, *IMAGES] if n != LEFT_OUT_NOTE and policy.refusal(n) is not None] == []
    for name in ("escape", "climb", "pipe", "null", LEFT_OUT_NOTE, "../x", "/etc/x", "a\x1b[2Jb"):
        assert policy.refusal(name) is not None, name


def test_a_link_inside_the_tree_is_not_the_policy_s_to_refuse() -> None:
    policy = exit_policy([ExitEntry("a/b", "link", "../c"), ExitEntry("a/up", "link", "../../c"),
                          ExitEntry("a/seen", "link")])  # fmt: skip
    assert policy.refusal("a/b") is None  # (extraction still writes no link)
    assert policy.refusal("a/up") is not None and policy.refusal("a/seen") is not None


def test_extraction_leaves_every_form_out_and_lists_it(tmp_path: Path) -> None:
    report = extract_leaving_out(planted_tar(), tmp_path, max_bytes=10**6)
    assert leaked(tmp_path) == [LEFT_OUT_NOTE]  # coderoom's own list, not the forged one
    assert all((tmp_path / name).read_bytes() for name in KEPT)
    note = (tmp_path / LEFT_OUT_NOTE).read_text()
    assert "nothing was left out" not in note
    for name in (".git/config", "pointer/.git", "lib1/config", "src/HEAD", "lib/config", "wt/gitdir", ".envrc", "null"):
        assert f"\n{name}: " in note, name
    assert {name for name, _ in report.refused} >= {".hg/hgrc", ".vscode/tasks.json", "escape", "pipe"}


def test_run_outputs_from_a_workspace_tar_leave_every_form_out(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    report = artifacts.SaveReport()
    artifacts._write_and_extract(planted_tar("output"), run_dir, 10**6, threading.Event(), report)
    assert leaked(run_dir, "output") == []
    assert (run_dir / "output/kept.csv").is_file() and (run_dir / "output/src/app/main.py").is_file()
    assert "output/.git/config" in report.refused and "output/src/HEAD" in report.refused
    assert "output/lib/config: " in (run_dir / LEFT_OUT_NOTE).read_text()


def test_rerun_restores_no_planted_form_from_an_archived_input(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "workspace.tar").write_bytes(planted_tar("input").getvalue())
    inputs, left_out = archived_inputs(run_dir, ["input"], tmp_path / "into", 10**6)
    assert inputs == {"input": tmp_path / "into" / "input"}
    assert leaked(tmp_path / "into", "input") == []
    assert (tmp_path / "into/input/kept.csv").is_file()
    assert {name for name, _ in left_out} >= {"input/.git/config", "input/bare/HEAD", "input/lib/config", "input/.envrc"}


def test_export_embeds_no_image_from_inside_planted_metadata(tmp_path: Path) -> None:
    (tmp_path / "workspace.tar").write_bytes(planted_tar("output").getvalue())
    images = WorkspaceImages(tmp_path)
    try:
        assert images.png("output/plot.png") is not None
        assert [name for name in IMAGES if images.png(f"output/{name}") is not None] == []
    finally:
        images.close()


@pytest.fixture
def forged_run(tmp_path: Path) -> Path:
    """A run folder from before the policy (or forged): every form sits in its output/."""
    run_dir = tmp_path / "runs" / "forged"
    plant_on_disk(run_dir / "output")
    (run_dir / "run.jsonl").write_text("{}\n")
    return run_dir


def test_the_page_lists_previews_downloads_and_zips_no_planted_form(forged_run: Path) -> None:
    source = web_files.RunFolderFiles(forged_run)
    listed = asyncio.run(web_files.listing(source))
    paths = [f["path"] for f in listed["files"]]
    assert "output/kept.csv" in paths and "output/src/app/main.py" in paths
    assert [name for name in REFUSED if f"output/{name}" in paths] == []
    assert {"output/.git", "output/src/HEAD", "output/escape", "output/pipe"} <= {f["path"] for f in listed["left_out"]}
    for name in REFUSED:
        with pytest.raises((RequestRefused, FileNotFoundError)):
            asyncio.run(web_files.download(source, PurePosixPath(f"output/{name}"), inline=False))
        with pytest.raises((RequestRefused, FileNotFoundError)):
            asyncio.run(web_files.preview(source, PurePosixPath(f"output/{name}")))
    for name in GIT_CONFIGS:  # a regular file: refused by the policy, not by chance
        with pytest.raises(RequestRefused, match="exit policy"):
            asyncio.run(web_files.download(source, PurePosixPath(f"output/{name}"), inline=False))

    async def zipped() -> bytes:
        reply = await web_files.zipped(source, "forged")
        return b"".join([chunk async for chunk in reply.body_iterator])  # type: ignore[misc]

    with zipfile.ZipFile(io.BytesIO(asyncio.run(zipped()))) as archive:
        names = archive.namelist()
        note = archive.read(LEFT_OUT_NOTE).decode()
    assert "output/kept.csv" in names
    assert [name for name in REFUSED if f"output/{name}" in names] == []
    assert "output/.git: " in note and "output/lib/config: " in note and "nothing was left out" not in note


def test_mcp_resources_of_a_run_refuse_every_planted_form(forged_run: Path) -> None:
    runs = forged_run.parent
    assert read_run_file(runs, "forged", "output/kept.csv") == KEPT["kept.csv"].encode()
    for name in REFUSED:
        with pytest.raises(RequestRefused):
            read_run_file(runs, "forged", f"output/{name}")
    for name in GIT_CONFIGS:
        with pytest.raises(RequestRefused, match="exit policy"):
            read_run_file(runs, "forged", f"output/{name}")


EXITS = {
    "coderoom.sandboxes.oneshot": "copy-back (sandbox run --workspace)",
    "coderoom.artifacts": "outputs extracted into a run folder",
    "coderoom.web.files": "the page's previews, downloads and zips",
    "coderoom.mcp_server.tools": "MCP read_file and resources",
    "coderoom.export.steps": "export's embedded images",
    "coderoom.export.rerun": "rerun's restore of archived inputs",
    "coderoom.cluster.transfer": "a run folder sent back from a Ray node (a batch's job, a live session's)",
}


@pytest.mark.parametrize("module", sorted(EXITS))
def test_every_exit_goes_through_the_one_policy(module: str) -> None:
    assert "coderoom.hostile.exits" in imported_modules(module), EXITS[module]


def test_no_other_module_reimplements_the_policy() -> None:
    """The hook names, the git-dir markers and the policy-free extraction live in hostile/ alone:
    outside it, a tar is extracted either through the exit policy (`hostile.exits`) or, on its way
    INTO a sandbox, through `hostile.archive.extract_into_sandbox`, never with `safe_extract_tar`."""
    rule = re.compile(r"""["'](\.git|\.envrc|\.vscode|commondir|HOST_HOOKS|coderoom-left-out\.txt)["']""")
    for name, path in MODULES.items():
        if name == "coderoom.hostile.exits":
            continue
        source = path.read_text()
        assert not rule.search(source), f"{name} names what hostile/exits.py decides"
        if name.startswith("coderoom.hostile."):
            continue
        names = {node.attr if isinstance(node, ast.Attribute) else node.id
                 for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.Attribute, ast.Name))}  # fmt: skip
        assert "safe_extract_tar" not in names, f"{name} extracts a tar without the exit policy"
    assert not (PACKAGE / "hostile" / "planted.py").exists()
