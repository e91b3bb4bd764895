"""Exit policy and prune pass (attackexit, 2026-12-02): planted forms the exit policy let out.

Written as the attacks, structure only (no git, hg or REPL is run on hostile data here):

* E01: a bare repository split across case spellings of one folder (`Ab/HEAD`, `aB/objects/`,
  `ab/refs/`, `AB/config`). No one spelling looks like a git dir, so all four leave; on a
  case-insensitive file system (a page zip unzipped on macOS or Windows, a copy-back onto
  vfat/exfat or a casefold ext4 folder) they are one folder, and git runs its `core.pager`
  (measured on a case-folded copy with a canary pager: the marker was made).
* E02: files a host tool runs from the current folder when the user merely starts it there,
  of the same kind as `.pdbrc` and `.Rprofile` (already refused): Python's REPL imports
  `readline.py` from the folder (measured: `python3 -i` in a folder with a planted
  `readline.py` ran it), irb/pry/ghci/octave start-up files, and the mise config names
  the list misses (it refuses `mise.toml`, `.mise.toml` and `.mise.local.toml` only).
"""

from __future__ import annotations

import asyncio
import io
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from coderoom.hostile.exits import ExitEntry, exit_policy, extract_leaving_out
from coderoom.web import files as web_files

CASE_SPLIT = {
    "Ab/HEAD": b"ref: refs/heads/main\n",
    "aB/objects/pack/keep": b"",
    "ab/refs/heads/keep": b"",
    "AB/config": b"[core]\n\tbare = true\n\tpager = true canary\n",
}


def _case_split_tar() -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in CASE_SPLIT.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def _folded_git_dirs(names: list[str]) -> set[str]:
    """The folders a case-insensitive file system would hold a git dir in (HEAD, objects/ and
    refs/ side by side once names are compared without case), from the names written."""
    children: dict[str, set[str]] = {}
    for name in names:
        parts = PurePosixPath(name.lower()).parts
        for index in range(1, len(parts)):
            children.setdefault("/".join(parts[:index - 1]) or ".", set())
            children.setdefault("/".join(parts[:index]), set()).add(parts[index])
    return {folder for folder, entries in children.items() if {"head", "objects", "refs"} <= entries}


def test_a_repository_split_across_case_spellings_is_not_extracted_whole(tmp_path: Path) -> None:
    report = extract_leaving_out(_case_split_tar(), tmp_path / "out", max_bytes=1 << 20)
    written = [str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert _folded_git_dirs(written) == set(), (written, report.refused)


def test_the_page_zip_carries_no_repository_split_across_case_spellings(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "forged"
    for name, data in CASE_SPLIT.items():
        path = run_dir / "output" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (run_dir / "run.jsonl").write_text("{}\n")
    source = web_files.RunFolderFiles(run_dir)

    async def zipped() -> bytes:
        reply = await web_files.zipped(source, "forged")
        return b"".join([chunk async for chunk in reply.body_iterator])  # type: ignore[misc]

    with zipfile.ZipFile(io.BytesIO(asyncio.run(zipped()))) as archive:
        names = archive.namelist()
    assert _folded_git_dirs(names) == set(), names


CWD_STARTUP = [
    "readline.py",  # python3's REPL: site's interactive hook imports readline with '' on sys.path
    "rlcompleter.py",
    ".irbrc",  # irb reads ./.irbrc
    ".pryrc",  # pry reads ./.pryrc
    ".ghci",  # ghci reads ./.ghci
    ".octaverc",  # octave reads ./.octaverc
    "mise.local.toml",  # mise: [hooks] enter / [env] _.source, like the refused mise.toml
    ".mise/config.toml",
    "mise/config.toml",
    ".rtx.toml",
    "mise.dev.toml",
]


@pytest.mark.parametrize("name", CWD_STARTUP)
def test_start_up_files_read_from_the_current_folder_are_kept_in(name: str) -> None:
    assert exit_policy([ExitEntry(name, "file")]).refusal(name) is not None
