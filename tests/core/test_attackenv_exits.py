"""Package environment pass (attackenv, 2026-12-06), the exit policy's name folding: X1-X4.

The page's zip renames each member for Windows (`portable_path`: `:`, `?`, `*`... become `_`)
after the exit policy judged the sandbox's own spelling, so a name that is nothing until renamed
(`ipython:config.py`, `:darcs/`) left as a hook (`ipython_config.py`, `_darcs/`). The spellings
a host takes for `.git` (case, NFD, HFS+ ignorables, trailing dots and spaces, GIT~1) stay
refused, and ordinary names, non-ASCII ones included, still leave."""

from __future__ import annotations

import asyncio
import io
import zipfile
from pathlib import Path

import pytest

from coderoom.hostile.exits import ExitEntry, exit_policy, host_key
from coderoom.web import files as web_files

RENAMED_INTO_HOOKS = {
    "output/ipython:config.py": "output/ipython_config.py",  # IPython runs it from the folder it starts in
    "output/jupyter:server_config.py": "output/jupyter_server_config.py",  # jupyter server, likewise
    "output/:darcs/prefs/defaults": "output/_darcs/prefs/defaults",  # darcs: `apply posthook` commands
    "output/?fossil_": "output/_fossil_",  # a fossil checkout database
}


def zip_names(run_dir: Path) -> list[str]:
    async def zipped() -> bytes:
        reply = await web_files.zipped(web_files.RunFolderFiles(run_dir), "forged")
        return b"".join([chunk async for chunk in reply.body_iterator])  # type: ignore[misc]

    with zipfile.ZipFile(io.BytesIO(asyncio.run(zipped()))) as archive:
        return archive.namelist()


def test_the_page_zip_carries_no_hook_that_only_its_windows_renaming_makes(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "forged"
    for name in [*RENAMED_INTO_HOOKS, "output/kept.csv", "output/a:b.csv"]:
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("import os\n")
    (run_dir / "run.jsonl").write_text("{}\n")
    names = zip_names(run_dir)
    assert "output/kept.csv" in names and "output/a_b.csv" in names  # ordinary names, renamed, still leave
    assert [name for name in RENAMED_INTO_HOOKS.values() if name in names] == []
    assert "coderoom-left-out.txt" in names


GIT_SPELLINGS = [
    ".GIT/config", ".Git/hooks/post-checkout", ".git./config", ".git /config", ".git. . /config",
    ".g\u200cit/config", ".gi\ufefft/config", "\u200e.git/config", "GIT~1/config", "git~12/config",
    ".gi\u0074/config", "sub/.GIT/config", "coderoom-left-out.txt.", "CODEROOM-LEFT-OUT.TXT",
]


@pytest.mark.parametrize("name", GIT_SPELLINGS)
def test_every_spelling_a_host_takes_for_dot_git_or_the_note_is_kept_in(name: str) -> None:
    policy = exit_policy([ExitEntry(name, "file")])
    assert policy.refusal(name) is not None, host_key(name.split("/")[0])


ORDINARY = [
    "données/résumé.csv", "Straße/plan.txt", "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645.txt",  # a Persian name with ZWNJ
    "gitlab/notes.md", "digit~1.txt", "git~a/x", ".gitignore", "GIT/readme", "my.git.txt", "objects/a.json", "Refs.txt",
    "head.png", "Makefile", "conftest.py", ".github/workflows/ci.yml", "a:b.csv",
]


@pytest.mark.parametrize("name", ORDINARY)
def test_an_ordinary_name_is_not_refused_by_folding(name: str) -> None:
    policy = exit_policy([ExitEntry(n, "file") for n in ORDINARY])
    assert policy.refusal(name) is None
