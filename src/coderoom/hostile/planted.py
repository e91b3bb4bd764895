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

from fnmatch import fnmatchcase
from pathlib import PurePosixPath

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
    ".config", ".local", ".ssh", ".gnupg", ".pdbrc", ".netrc",
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
