"""Names that came from a sandbox or a record: validated before use, escaped before display."""

from __future__ import annotations

from pathlib import PurePosixPath


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
