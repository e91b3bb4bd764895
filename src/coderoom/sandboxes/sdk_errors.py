"""Errors both coderoom SDK sessions raise in the SDK's own types, so a user of the Agents SDK
catches them as documented and coderoom's CLI still exits with the right code.

* `refuse_unsupported`: what coderoom's sandboxes do not offer (manifest users and groups,
  grants of host paths, mounts, exposed ports), refused by `client.create` and `client.resume`
  before anything starts. The SDK 0.24 provisions manifest accounts inside `_apply_manifest`,
  after the sandbox started; without this check the request failed deep inside `useradd`.
* `snapshot_errors`: a refused snapshot (`hostile.snapshot.SnapshotRefused`) as the SDK's
  WorkspaceArchiveWriteError, with the same `reason` and `member` context as the SDK's own
  extractor gives.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from agents.sandbox import Manifest
from agents.sandbox.entries import Mount
from agents.sandbox.errors import ConfigurationError, ErrorCode, WorkspaceArchiveWriteError

from ..errors import CoderoomError, UsageError
from ..hostile.snapshot import SnapshotRefused


class UnsupportedFeature(ConfigurationError, UsageError):
    """A sandbox feature coderoom does not offer; the message names it and the alternative.
    The SDK's ConfigurationError (sandbox_config_invalid) and a usage error (exit 2), so also a
    ValueError, which SDK-style callers catch for a bad manifest."""

    def __init__(self, feature: str, alternative: str, backend: str) -> None:
        super().__init__(
            message=f"coderoom's {backend} sandbox does not support {feature}: {alternative}",
            error_code=ErrorCode.SANDBOX_CONFIG_INVALID,
            op="start",
            context={"feature": feature, "backend": backend},
            retryable=False,
        )


def refuse_unsupported(manifest: Manifest, backend: str, *, exposed_ports: Sequence[int] = ()) -> None:
    """UnsupportedFeature for the first feature of `manifest` (or `exposed_ports`) that
    coderoom's sandboxes do not offer. A grant without a host_path names a path inside the
    sandbox, not a host one: it is the backend's to take or refuse."""
    if manifest.users or manifest.groups:
        raise UnsupportedFeature(
            "manifest users and groups",
            "every command runs as the sandbox's one unprivileged user; drop Manifest(users=..., groups=...)",
            backend,
        )
    if any(grant.host_path is not None for grant in manifest.extra_path_grants):
        raise UnsupportedFeature(
            "extra path grants of host paths (host_path)",
            "the workspace is the only shared path; copy inputs in with Manifest entries "
            "(File, LocalFile, LocalDir) or session.write()",
            backend,
        )
    if any(isinstance(entry, Mount) for _, entry in manifest.iter_entries()):
        raise UnsupportedFeature(
            "mounts",
            "copy the data into the workspace with Manifest entries (LocalFile, LocalDir) instead",
            backend,
        )
    if exposed_ports:
        raise UnsupportedFeature(
            "exposed ports",
            "the sandbox has no inbound network; read results from the workspace (session.read)",
            backend,
        )


@contextmanager
def snapshot_errors(root: Path) -> Iterator[None]:
    """SnapshotRefused, OSError and coderoom errors raised while restoring a snapshot into
    `root`, as the SDK's WorkspaceArchiveWriteError."""
    try:
        yield
    except SnapshotRefused as exc:
        raise WorkspaceArchiveWriteError(
            path=root, context={"reason": exc.reason, "member": exc.member}, cause=exc
        ) from exc
    except CoderoomError as exc:  # docker: tar -x in the container failed (the reason is its stderr)
        raise WorkspaceArchiveWriteError(path=root, context={"reason": exc.message}, cause=exc) from exc
    except OSError as exc:
        raise WorkspaceArchiveWriteError(path=root, context={"reason": str(exc)}, cause=exc) from exc
