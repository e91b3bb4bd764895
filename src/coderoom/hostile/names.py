"""Names that came from a sandbox or a record: validated before use, escaped before display."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

MAX_NAME_BYTES = 255
"""Of one path component in UTF-8: NAME_MAX of Linux file systems. A longer name is refused
before anything is made for it, not failed on by the sandbox half way."""
WINDOWS_SEPARATOR = "\\"
_NOT_ON_WINDOWS = re.compile(r'[\\:*?"<>|\x00-\x1f]')
"""What a Windows unzip reads as a separator, a drive (`C:`), a stream, a wildcard or a control."""
_WINDOWS_DEVICES = re.compile(r"^(con|prn|aux|nul|com[0-9]|lpt[0-9])(\..*)?$", re.IGNORECASE)


class UnsafePath(ValueError):
    """A member name that could escape the destination or is not a plain relative path."""


def safe_relative_path(name: str) -> PurePosixPath:
    """Normalise a workspace-relative name; refuse absolute, `..`, empty and NUL-bearing names."""
    if not name or "\x00" in name:
        raise UnsafePath(f"{name!r}: empty or contains NUL")
    path = PurePosixPath(name)
    if path.is_absolute():
        raise UnsafePath(f"{name!r}: absolute path")
    parts = [part for part in path.parts if part not in ("", ".")]
    if not parts:
        raise UnsafePath(f"{name!r}: names the root")
    if any(part == ".." for part in parts):
        raise UnsafePath(f"{name!r}: contains '..'")
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in parts):
        raise UnsafePath(f"{shown(name)}: a component is over {MAX_NAME_BYTES} bytes in UTF-8 (MAX_NAME_BYTES)")
    return PurePosixPath(*parts)


def has_windows_separator(name: str) -> bool:
    """`name` holds a backslash: a separator to Windows, so `..\\..\\x` climbs out there."""
    return WINDOWS_SEPARATOR in name


def portable_path(path: PurePosixPath) -> PurePosixPath:
    """`path` (already safe on POSIX) as a name that means the same one file on Windows too, for
    anything that goes to a user's machine (a zip): a backslash, `:` (a drive letter, an NTFS
    stream), the other characters Windows refuses and controls become `_`; a device name (CON,
    NUL, COM1...) gets a `_` before it and a component ending in a dot or space one after it. One rule with
    `has_windows_separator`, which a snapshot uses to refuse such a member outright."""
    parts = []
    for part in path.parts:
        part = _NOT_ON_WINDOWS.sub("_", part)
        if _WINDOWS_DEVICES.match(part):
            part = "_" + part
        if part.endswith((".", " ")):
            part += "_"
        parts.append(part)
    return PurePosixPath(*parts)


def shown(name: object, limit: int = 80) -> str:
    """A sandbox-chosen name for a message: quoted, escaped and short."""
    text = repr(str(name))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def rebased_link(target: str, link: PurePosixPath, root: str) -> str:
    """An absolute symlink target under `root` (the sandbox's /workspace) as one relative to the
    link, so a snapshot stays valid wherever it is restored; anything else unchanged.

    Only simple targets are rewritten (every component after `root` a plain name, as the SDK's
    tar helpers do): `/workspace/a/../b` could mean something else once a component is a link,
    so it stays absolute, and restoring refuses it instead of guessing."""
    prefix = root.rstrip("/") + "/"
    if not target.startswith(prefix):
        return target
    parts = target[len(prefix):].split("/")
    if not parts or any(part in ("", ".", "..") for part in parts):
        return target
    climb = [".."] * (len(link.parts) - 1)
    return "/".join([*climb, *parts])
