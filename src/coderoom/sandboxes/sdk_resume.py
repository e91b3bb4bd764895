"""What a resumed SDK session takes from its serialized state, and what it takes from the
trusted client instead.

A serialized session state is hostile input (it may have been edited on disk or on the wire),
so it never chooses a host path, a limit, an image or where snapshots live:

* the snapshot (AP-R4): a state's `snapshot` names a host directory (`LocalSnapshot.base_path`)
  that resume reads into the sandbox and stop writes the workspace to. It is replaced by the one
  the client itself built for that session (`remember`, at create) or, for a session this client
  did not create, by the client's own snapshot spec (none: a resumed session restores nothing);
* the manifest's entries (AP-R3): the SDK re-applies a resumed manifest's entries on start, and
  `LocalFile`/`LocalDir` entries would copy host files (a `.env` in the host's cwd) into the
  sandbox. Host files enter only through `create` with the caller's own manifest, so a resumed
  manifest keeps only entries made of their own bytes (`File`, `Dir`), at any depth.

Limits and (docker) the image are replaced by each client's `resume` the same way.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path

from agents.sandbox import Manifest
from agents.sandbox.entries import BaseEntry, Dir, File
from agents.sandbox.session import SandboxSessionState
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot


class TrustedResume:
    """A client's record of the snapshots it built, and the spec for the sessions it did not."""

    def __init__(self, snapshot: SnapshotSpec | None = None) -> None:
        self._spec = snapshot
        self._built: dict[uuid.UUID, SnapshotBase] = {}

    def remember(self, state: SandboxSessionState) -> None:
        """Called by `create`: the caller's snapshot for this session, kept out of the state's reach."""
        self._built[state.session_id] = state.snapshot.model_copy(deep=True)

    def distrust(self, state: SandboxSessionState) -> None:
        """Replace what `state` must not choose (see the module docstring), in place."""
        built = self._built.get(state.session_id)
        state.snapshot = (
            built.model_copy(deep=True) if built is not None else resolve_snapshot(self._spec, str(state.session_id))
        )
        state.manifest = own_bytes_only(state.manifest)


def own_bytes_only(manifest: Manifest) -> Manifest:
    """`manifest` without entries whose content comes from outside it (host files, repositories)."""
    return manifest.model_copy(update={"entries": _kept(manifest.entries)})


def _kept(entries: Mapping[str | Path, BaseEntry]) -> dict[str | Path, BaseEntry]:
    kept: dict[str | Path, BaseEntry] = {}
    for path, entry in entries.items():
        if isinstance(entry, Dir):
            kept[path] = entry.model_copy(update={"children": _kept(entry.children)})
        elif isinstance(entry, File):
            kept[path] = entry
    return kept
