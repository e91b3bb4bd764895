"""The one exit policy: which of the files a sandbox wrote may leave it for the host.

Every exit asks `exit_policy` about the same set of workspace entries (names and kinds, from a
tar or a listing): copy-back into `sandbox run --workspace DIR`, the outputs extracted into a
run folder, the page's single-file downloads, previews and zips, MCP `read_file` and resources,
the images `export` embeds, and `rerun`'s restore of archived inputs. A name is not data when a
host program would execute or trust it the next time the user merely works in that folder:

* VCS metadata of every kind: `.git` folders and `.git` FILES (`gitdir:` pointers), `.hg`,
  `.svn` and the rest of `HOST_HOOKS`; and any folder git itself would take for a git dir under
  another name: HEAD beside objects/, refs/, `commondir` or `gitdir` (a bare repository, a
  worktree's admin folder, one half of a repository split across folders), and a folder that
  holds objects/ and refs/ (what a `commondir` file points to). Git reads such a folder's
  `config` and runs `core.pager`/`core.fsmonitor` from it (measured: `git branch` in a
  copied-back `src/app` ran the sandbox's pager). When in doubt the folder's git entries go.
  Names are compared as a host may merge them (`host_key`: case, NFC/NFD, trailing dots and
  spaces), so `Ab/HEAD` beside `aB/objects/` is one folder, as it is once unzipped on macOS.
* direnv, mise, shell, editor and tool hooks (`.envrc`, `.vscode/`, `.idea/`, `*.pth`, ...),
  and start-up files a tool reads from the current folder (`readline.py`, `.irbrc`, `.ghci`);
* device nodes, FIFOs and sockets; links whose target leaves the tree, or that a listing
  shows without their target;
* names unsafe on the host: absolute, `..`, NUL, control characters, over-long components,
  and `LEFT_OUT_NOTE`, the name of coderoom's own list, which a sandbox must not forge.

What is left out is reported the same way everywhere: `left_out_note` (a `LEFT_OUT_NOTE` file
beside extracted files and inside zips) or the (name, reason) list in a JSON or MCP answer.
`everything=True` (`--copy-back-all`) is the one deliberate override, and it lifts only the
hook and VCS rules: unsafe names, special files and links out of the tree never leave.

Project code the user runs on purpose (Makefile, conftest.py, package.json) is what a
workspace is for, and leaves.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import tarfile
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import IO

from ..errors import RequestRefused
from .archive import ExtractReport, each_member, open_plain, safe_extract_tar
from .names import UnsafePath, safe_relative_path, shown
from .text import terminal_safe
from .tree import MAX_ENTRIES, WorkspaceLimitError, walk

LEFT_OUT_NOTE = "coderoom-left-out.txt"

HOST_HOOKS: tuple[str, ...] = (
    # version control: metadata and config that git/hg/svn/bzr/darcs/fossil/jj execute from
    ".git", ".hg", ".svn", ".bzr", "_darcs", ".fslckout", "_fossil_", ".jj", ".pijul", ".gitconfig",
    ".hgrc", ".gitmodules", ".gitattributes", ".pre-commit-config.yaml", ".pre-commit-hooks.yaml",
    ".husky", ".lefthook.yml", "lefthook.yml",
    # directory-entered hooks: direnv, dotenv loaders, and every config name mise (rtx, its old
    # name) reads from a folder: each can run [hooks] and [env] _.source on entering it
    ".envrc", ".direnv", ".env", "mise.toml", ".mise.toml", "mise.*.toml", ".mise.*.toml", "mise", ".mise",
    ".rtx.toml", ".rtx.*.toml",
    # editors and IDEs: tasks and settings run on folder open
    ".vscode", ".idea", ".devcontainer", ".exrc", ".vimrc", ".nvimrc", ".nvim.lua", ".dir-locals.el",
    # shells and per-user configuration, should DIR be (or become) a home folder
    ".profile", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc", ".zshenv",
    ".zprofile", ".zlogin", ".zlogout", ".kshrc", ".cshrc", ".tcshrc", ".login", ".logout", ".inputrc",
    ".config", ".local", ".ssh", ".gnupg", ".pdbrc", ".netrc", ".bash_aliases", ".xprofile",
    ".xsession", ".xinitrc", ".pam_environment", ".tmux.conf", ".screenrc", ".emacs", ".emacs.d",
    ".aws", ".kube", ".docker", ".azure", ".terraformrc", ".Rprofile", ".jupyter", ".ipython",
    "jupyter_*config.py", "ipython_config.py", "rust-toolchain", "rust-toolchain.toml",
    # package tools that run configured commands
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", ".cargo", ".pypirc", "pip.conf",
    # Python start-up hooks
    "*.pth", "sitecustomize.py", "usercustomize.py",
    # start-up files a tool reads from the current folder when the user merely starts it there.
    # Python 3.11 measured (a canary module for every name `-X importtime` lists, in cwd):
    # `-c` and `-m` import none from cwd (site has run before '' joins sys.path), `-i` imports
    # readline and rlcompleter. `python -m NAME` runs ./NAME on purpose, like a Makefile.
    "readline.py", "rlcompleter.py", ".irbrc", ".pryrc", ".ghci", ".octaverc", ".iex.exs",
    ".ocamlinit", ".perldb", ".Renviron", ".RData",  # R runs `.First` from a cwd .RData
    # gdb and lldb refuse ./.gdbinit and ./.lldbinit by default, but `set auto-load safe-path /`
    # and `target.load-cwd-lldbinit true` are common advice; refused, since the cost is one
    # listed name (kept in workspace.tar) against a debugger running the sandbox's commands
    ".gdbinit", ".lldbinit",
)
"""Patterns (`fnmatch`) for any one component of a path, compared by `host_key`, as a
case-insensitive, normalising host file system compares names: `sub/.git/config` is as live as
`.git/config` once the user enters `sub`. A refused directory takes everything beneath it."""

GIT_DIR_ENTRIES = frozenset({
    "head", "config", "config.worktree", "objects", "refs", "packed-refs", "hooks", "info", "index",
    "description", "logs", "worktrees", "commondir", "gitdir", "modules", "fetch_head", "orig_head",
    "shallow", "branches", "remotes", "sequencer", "rr-cache", "rebase-merge", "rebase-apply",
})
"""What git reads in a folder it takes for a git dir (compared by `host_key`)."""
GIT_DIR_MARKERS = frozenset({"objects", "refs", "commondir", "gitdir"})
"""Beside HEAD, any one of these makes git (`is_git_directory`, `get_common_dir`) or a worktree
lookup take the folder for a git dir; objects/ and refs/ together are what a commondir names."""

HOOK_REASON = "a VCS, shell or editor hook that host tools run"
GIT_DIR_REASON = "part of a folder git would take for a repository (its config runs commands)"
SPECIAL_REASON = "a device, FIFO or socket"
LINK_OUT_REASON = "a link that leaves the tree"
LINK_UNKNOWN_REASON = "a link whose target this exit cannot see"
NOTE_REASON = f"named {LEFT_OUT_NOTE}, coderoom's own list of what was left out"
OVERRIDABLE = frozenset({HOOK_REASON, GIT_DIR_REASON})
"""What `everything=True` (`--copy-back-all`) lets out; nothing else is ever let out."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# code points HFS+ ignores in names, so `.g\u200cit` is `.git` there (git's is_hfs_dotgit list)
_HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")
# an NTFS 8.3 short name: `GIT~1` is `.git` in a checkout on Windows (git's is_ntfs_dotgit); any
# digit, since which alias a folder gets depends on its neighbours
_NTFS_SHORT_DOTGIT = re.compile(r"git~[0-9]+")


def host_key(name: str) -> str:
    """The one name a host file system may take `name` for: case folded (macOS, Windows, vfat,
    exfat, casefold ext4), NFC and NFD spellings made one and HFS+'s ignored code points dropped
    (macOS), trailing dots and spaces removed and `git~N` taken as `.git` (Windows). Every
    comparison of a name with a rule goes through this key, so `Ab/HEAD` beside `aB/objects/` is
    one folder, as it is once unzipped there."""
    decomposed = _HFS_IGNORED.sub("", unicodedata.normalize("NFD", name)).casefold()
    key = unicodedata.normalize("NFC", decomposed).rstrip(". ")
    return ".git" if _NTFS_SHORT_DOTGIT.fullmatch(key) else key


_HOOK_KEYS = tuple(host_key(pattern) for pattern in HOST_HOOKS)
_NOTE_KEY = host_key(LEFT_OUT_NOTE)


@dataclass(frozen=True)
class ExitEntry:
    """One workspace entry as a sandbox reported it: its name, its kind ("file", "dir", "link"
    or "other"), for a link its target when known, and its size."""

    name: str
    kind: str
    target: str | None = None
    size: int = 0


class ExitPolicy:
    """The decision for one set of entries: `refusal(name)` is why a name may not leave, or None."""

    def __init__(self, entries: Iterable[ExitEntry], *, everything: bool = False, own: Iterable[str] = ()) -> None:
        self.everything = everything
        self._own = {PurePosixPath(name) for name in own}
        self._kinds: dict[PurePosixPath, ExitEntry] = {}
        children: dict[tuple[str, ...], set[str]] = {}  # by host key: every spelling of a folder is one
        for entry in entries:
            try:
                path = safe_relative_path(entry.name)
            except UnsafePath:
                continue  # refused by name whenever it is asked about
            self._kinds[path] = entry
            keys = _keys(path)
            for depth in range(len(keys)):
                children.setdefault(keys[:depth], set()).add(keys[depth])
        self.git_dirs = frozenset(
            folder for folder, names in children.items()
            if ("head" in names and names & GIT_DIR_MARKERS) or {"objects", "refs"} <= names
        )  # fmt: skip  (folders as host keys: each spelling's git entries are refused)

    def refusal(self, name: str | PurePosixPath) -> str | None:
        """Why `name` (workspace-relative, as the sandbox wrote it) must stay in, or None."""
        try:
            path = safe_relative_path(str(name))
        except UnsafePath as exc:
            return f"a name unsafe on the host: {exc}"
        reason = self._strict(path)
        if reason is None and not self.everything:
            reason = self._hooks(path)
        return reason

    def _strict(self, path: PurePosixPath) -> str | None:
        if _CONTROL.search(str(path)):
            return "a name unsafe on the host: it holds control characters"
        if host_key(path.name) == _NOTE_KEY and path not in self._own:
            return NOTE_REASON
        entry = self._kinds.get(path)
        if entry is None:
            return None
        if entry.kind == "other":
            return SPECIAL_REASON
        if entry.kind == "link" and entry.target is None:
            return LINK_UNKNOWN_REASON
        if entry.kind == "link" and not _stays_inside(path, entry.target):
            return LINK_OUT_REASON
        return None

    def _hooks(self, path: PurePosixPath) -> str | None:
        if host_hook(path) is not None:
            return HOOK_REASON
        keys = _keys(path)
        for index in range(len(keys)):
            if keys[:index] in self.git_dirs and keys[index] in GIT_DIR_ENTRIES:
                return GIT_DIR_REASON
        return None

    def left_out(self) -> list[tuple[str, str]]:
        """Every listed entry this policy keeps in, with its reason, topmost first (a refused
        folder stands for what is beneath it)."""
        refused: list[tuple[str, str]] = []
        folders: set[PurePosixPath] = set()
        for path in sorted(self._kinds):
            if any(parent in folders for parent in path.parents):
                continue
            if (reason := self.refusal(path)) is not None:
                refused.append((str(path), reason))
                folders.add(path)
        return refused


def host_hook(rel: PurePosixPath) -> str | None:
    """Why `rel` must not go to the host by its name alone (`HOST_HOOKS`), or None."""
    for key in _keys(rel):
        if any(fnmatchcase(key, pattern) for pattern in _HOOK_KEYS):
            return HOOK_REASON
    return None


def _keys(path: PurePosixPath) -> tuple[str, ...]:
    """`host_key` of each component of `path`."""
    return tuple(host_key(part) for part in path.parts)


def _stays_inside(link: PurePosixPath, target: str | None) -> bool:
    """A link's target resolves within the tree (by its text)."""
    if not target or target.startswith("/"):
        return False
    resolved = posixpath.normpath(posixpath.join(str(link.parent), target))
    return resolved != ".." and not resolved.startswith("../")


def exit_policy(entries: Iterable[ExitEntry], *, everything: bool = False, own: Iterable[str] = ()) -> ExitPolicy:
    """The exit policy for these entries (the whole tree the exit sees: a git dir is found from
    its siblings). `everything`: the deliberate override (`--copy-back-all`). `own`: the paths
    of coderoom's own `LEFT_OUT_NOTE` files in this tree (a run folder's), which are not forged."""
    return ExitPolicy(entries, everything=everything, own=own)


def tar_entries(archive: IO[bytes]) -> list[ExitEntry]:
    """The entries of a workspace tar (a first pass over its headers only; rewound afterwards)."""
    with open_plain(archive) as tar:
        entries = [tar_entry(member) for member in each_member(tar)]
    archive.seek(0)
    return entries


def tar_entry(member: tarfile.TarInfo) -> ExitEntry:
    """A tar member as the exit policy sees it."""
    return ExitEntry(member.name.removeprefix("./"), _tar_kind(member), member.linkname or None, member.size)


def folder_entries(root: Path, *, max_depth: int = 32, max_files: int = MAX_ENTRIES) -> list[ExitEntry]:
    """The entries of a host folder of hostile files (a run folder), walked without following a
    link (`tree.walk`), up to `max_files` regular files; a folder that changes or goes too deep
    is listed as far as it was read."""
    entries: list[ExitEntry] = []
    files = 0
    try:
        for entry in walk(root, max_depth=max_depth):
            mode = entry.st.st_mode
            if stat.S_ISLNK(mode):
                entries.append(ExitEntry(str(entry.rel), "link", os.readlink(entry.name, dir_fd=entry.dir_fd)))
                continue
            kind = "file" if stat.S_ISREG(mode) else "dir" if stat.S_ISDIR(mode) else "other"
            entries.append(ExitEntry(str(entry.rel), kind, size=entry.st.st_size))
            files += kind == "file"
            if files >= max_files:
                break
    except (OSError, WorkspaceLimitError):
        pass
    return entries


def _tar_kind(member: tarfile.TarInfo) -> str:
    if member.isdir():
        return "dir"
    if member.issym():
        return "link"
    if member.isreg() or member.islnk():  # a hard link names a member of the same tar
        return "file"
    return "other"


def left_out_note(refused: Iterable[tuple[str, str]]) -> str:
    """The text of LEFT_OUT_NOTE: one escaped line per name kept in, with its reason."""
    lines = [f"{terminal_safe(name)}: {terminal_safe(reason)}" for name, reason in refused]
    return "coderoom left these out: host tools could run or trust them, or they are not plain files\n" + "\n".join(lines) + "\n"



def extract_leaving_out(
    archive: IO[bytes] | Path,
    dest: Path,
    *,
    max_bytes: int,
    members: Iterable[str] | None = None,
    everything: bool = False,
    note: bool = True,
) -> ExtractReport:
    """Extract a workspace tar onto the host through the exit policy (`safe_extract_tar` with
    `exit_policy(...).refusal`); with `note`, what was left out is listed in dest/LEFT_OUT_NOTE."""
    if isinstance(archive, Path):
        with archive.open("rb") as handle:
            return extract_leaving_out(handle, dest, max_bytes=max_bytes, members=members, everything=everything, note=note)
    policy = exit_policy(tar_entries(archive), everything=everything)
    report = safe_extract_tar(archive, dest, members=members, max_bytes=max_bytes, refuse=policy.refusal)
    if note and report.refused:
        write_note(dest, report.refused)
    return report


def write_note(folder: Path, refused: Iterable[tuple[str, str]]) -> None:
    """Write folder/LEFT_OUT_NOTE afresh (whatever was there, a planted link included, is replaced)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            os.unlink(LEFT_OUT_NOTE, dir_fd=fd)
        except FileNotFoundError:
            pass
        out = os.open(LEFT_OUT_NOTE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        with os.fdopen(out, "w", encoding="utf-8") as handle:
            handle.write(left_out_note(refused))
    finally:
        os.close(fd)


def refuse_leaving(policy: ExitPolicy, name: str | PurePosixPath) -> None:
    """A single file asked for by name (a download, an MCP read): RequestRefused if the policy
    keeps it in, with the same reason every exit gives."""
    if (reason := policy.refusal(name)) is not None:
        raise RequestRefused(f"{shown(str(name))}: left out by coderoom's exit policy: {reason}")
