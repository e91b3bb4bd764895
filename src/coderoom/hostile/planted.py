"""Files a sandbox must not plant in a host folder: ones that make host tools run code there.

Copying a workspace back (`coderoom sandbox run --workspace DIR`) writes names the sandbox
chose into the user's folder. A few names are not data but configuration that host programs
execute on their own the next time the user merely works in that folder: `git status` runs
`core.fsmonitor` from `.git/config` (measured, catalogue ART-10), direnv runs `.envrc` on `cd`,
an editor runs `.vscode/tasks.json` on folder open, a shell sources its start-up files, Python
runs `.pth` lines at every start. Project code the user runs on purpose (Makefile, conftest.py,
package.json) is what a workspace is for and is copied back.
"""

from __future__ import annotations

from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import PurePosixPath
from typing import IO

from .archive import each_member, open_plain

HOST_HOOKS: tuple[str, ...] = (
    # version control: metadata and config that git/hg/svn/bzr/darcs/fossil execute from
    ".git", ".hg", ".svn", ".bzr", "_darcs", ".fslckout", "_fossil_", ".gitconfig", ".hgrc",
    ".gitmodules", ".pre-commit-config.yaml", ".husky",
    # directory-entered hooks: direnv, mise, dotenv loaders
    ".envrc", ".direnv", ".env", ".mise.toml", "mise.toml",
    # editors and IDEs: tasks and settings run on folder open
    ".vscode", ".idea", ".devcontainer", ".exrc", ".vimrc", ".nvimrc", ".nvim.lua", ".dir-locals.el",
    # shells and per-user configuration, should DIR be (or become) a home folder
    ".profile", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc", ".zshenv",
    ".zprofile", ".zlogin", ".zlogout", ".kshrc", ".cshrc", ".tcshrc", ".login", ".logout", ".inputrc",
    ".config", ".local", ".ssh", ".gnupg", ".pdbrc", ".netrc", ".bash_aliases", ".xprofile",
    ".xsession", ".xinitrc", ".pam_environment", ".tmux.conf", ".screenrc", ".emacs", ".emacs.d",
    ".aws", ".kube", ".docker", ".azure", ".terraformrc", ".Rprofile", ".jupyter", ".ipython",
    "jupyter_*config.py", "ipython_config.py", ".mise.local.toml", "rust-toolchain", "rust-toolchain.toml",
    # package tools that run configured commands
    ".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", ".cargo", ".pypirc", "pip.conf",
    # Python start-up hooks
    "*.pth", "sitecustomize.py", "usercustomize.py",
)
"""Patterns (`fnmatch`, compared case-insensitively, for case-insensitive file systems) for
any one component of a path: `sub/.git/config` is as live as `.git/config` once the user
enters `sub`. A refused directory takes everything beneath it."""


HOOK_REASON = "a VCS, shell or editor hook that host tools run"


def host_hook(rel: PurePosixPath) -> str | None:
    """Why `rel` must not be copied to the host, or None if it may be."""
    for part in rel.parts:
        lowered = part.lower()
        if any(fnmatchcase(lowered, pattern) for pattern in HOST_HOOKS):
            return HOOK_REASON
    return None


# What git reads in a folder it takes for a repository (a bare one needs only HEAD, objects/
# and refs/, under any name: `git -C DIR diff` then runs DIR/config's core.pager).
GIT_DIR_ENTRIES = frozenset({
    "head", "config", "objects", "refs", "packed-refs", "hooks", "info", "index", "description",
    "logs", "worktrees", "commondir", "gitdir", "modules", "fetch_head", "orig_head",
})
GIT_DIR_REASON = "part of a folder git would take for a repository (its config runs commands)"


def hook_refusal(archive: IO[bytes]) -> Callable[[PurePosixPath], str | None]:
    """The copy-back refusal for a workspace `archive` (rewound afterwards): `host_hook`, and the
    git entries of every folder that holds HEAD beside objects/ and refs/, whatever it is called
    (an implicit bare repository, which no name list catches)."""
    names: set[PurePosixPath] = set()
    with open_plain(archive) as tar:  # a first pass over the names only
        for member in each_member(tar):
            path = PurePosixPath(member.name.removeprefix("./"))
            names.add(path)
            names.update(path.parents)
    archive.seek(0)
    repositories = {
        path.parent for path in names
        if path.name.lower() == "head" and {path.parent / "objects", path.parent / "refs"} <= names
    }  # fmt: skip

    def refuse(rel: PurePosixPath) -> str | None:
        if (reason := host_hook(rel)) is not None:
            return reason
        for index in range(len(rel.parts)):
            folder = PurePosixPath(*rel.parts[:index])
            if folder in repositories and rel.parts[index].lower() in GIT_DIR_ENTRIES:
                return GIT_DIR_REASON
        return None

    return refuse
