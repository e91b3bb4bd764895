"""What a user of the Agents SDK gets from coderoom's sessions, on every backend: unsupported
features refused at create with a clear error (before anything starts), apply_patch's "Add File"
exclusive, and `client.resume(state)` of a live session and of a closed one."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest
from agents.editor import ApplyPatchOperation
from agents.sandbox import Manifest
from agents.sandbox.apply_patch import WorkspaceEditor
from agents.sandbox.entries import InContainerMountStrategy, MountpointMountPattern, S3Mount
from agents.sandbox.errors import ApplyPatchDiffError, ConfigurationError, WorkspaceArchiveWriteError
from agents.sandbox.manifest import SandboxPathGrant
from agents.sandbox.snapshot import LocalSnapshotSpec
from agents.sandbox.types import User

from coderoom.errors import EXIT_USAGE
from coderoom.sandboxes import SandboxSpec, get_backend
from coderoom.sandboxes.sdk_errors import UnsupportedFeature
from coderoom.sandboxes.session import open_session

def _mine(backend: str) -> set[str]:
    """What this test process holds of a backend: its docker containers (by the owner pid label),
    or its local session folders."""
    if backend == "docker":
        import docker

        from coderoom.sandboxes.docker.labels import HOST_PID_LABEL

        found = docker.from_env().containers.list(all=True, filters={"label": f"{HOST_PID_LABEL}={os.getpid()}"})
        return {c.id for c in found}
    from coderoom.sandboxes.local import host_dir

    return {p.name for p in host_dir.parent().glob(host_dir.PREFIX + "*")}


@pytest.mark.parametrize("feature", ["users", "grants", "mounts", "ports", "root"])
async def test_unsupported_features_are_refused_at_create_naming_the_alternative(
    backend: str, feature: str, tmp_path: Path
) -> None:
    client, options = get_backend(backend).client(SandboxSpec(backend=backend))
    manifest = Manifest()
    if feature == "users":
        manifest = Manifest(users=[User(name="analyst")])
    elif feature == "grants":
        manifest = Manifest(extra_path_grants=(SandboxPathGrant(path="/srv/data", host_path=str(tmp_path)),))
    elif feature == "mounts":  # never mounted: refused before any container or folder exists
        strategy = InContainerMountStrategy(pattern=MountpointMountPattern())
        manifest = Manifest(entries={"data": S3Mount(bucket="b", mount_strategy=strategy)})
    elif feature == "root":
        if backend != "local":
            pytest.skip("a container's workspace may be at any path")
        manifest = Manifest(root="/tmp/work")  # each command's /tmp is its own (test_workspace_root)
    elif backend == "local":
        pytest.skip("the local client takes no exposed ports option")
    else:
        options = options.model_copy(update={"exposed_ports": (8080,)})
    before = _mine(backend)
    with pytest.raises(UnsupportedFeature) as caught:
        await client.create(manifest=manifest, options=options)
    assert isinstance(caught.value, ConfigurationError)  # the SDK's type, and coderoom's exit 2
    assert caught.value.exit_code == EXIT_USAGE
    named = {"users": "manifest users and groups", "grants": "extra path grants", "mounts": "mounts", "ports": "exposed ports",
             "root": "the workspace root '/tmp/work'"}
    assert named[feature] in str(caught.value) and ": " in str(caught.value)
    assert _mine(backend) == before  # nothing was made, let alone started


async def test_apply_patch_add_file_refuses_an_existing_name_and_a_dangling_symlink(backend: str) -> None:
    async with open_session(SandboxSpec(backend=backend)) as session:
        await session.exec("echo original > taken.txt && ln -s /workspace/nowhere.txt dangling.txt")
        editor = WorkspaceEditor(session)
        for name in ("taken.txt", "dangling.txt"):
            with pytest.raises(ApplyPatchDiffError, match="already exists"):
                await editor.apply_operation(ApplyPatchOperation(type="create_file", path=name, diff="+new\n"))
        created = await editor.apply_operation(ApplyPatchOperation(type="create_file", path="sub/new.txt", diff="+new\n"))
        assert "Created" in created.output
        listing = await session.exec("cat taken.txt sub/new.txt; ls nowhere.txt 2>&1 || true")
    assert listing.stdout.startswith(b"original\nnew")  # the link's target was never created
    assert b"No such file" in listing.stdout


async def started_with_snapshots(backend: str, folder: Path) -> tuple[Any, Any]:
    """The backend's SDK client and a started session of it whose snapshots go to `folder`."""
    client, options = get_backend(backend).client(SandboxSpec(backend=backend))
    session = await client.create(manifest=Manifest(), snapshot=LocalSnapshotSpec(base_path=folder), options=options)
    await session.start()
    return client, session


async def test_resume_adopts_a_live_session_and_restores_a_closed_one_from_its_snapshot(
    backend: str, tmp_path: Path
) -> None:
    client, session = await started_with_snapshots(backend, tmp_path)
    try:
        await session.exec("echo kept > state.txt && chmod 750 state.txt")
        live = await client.resume(session.state)  # while the first one still runs
        await live.start()
        assert (await live.exec("cat state.txt")).stdout == b"kept\n"
        await live.aclose()  # persists the snapshot and stops the sandbox
        state = live.state
        await client.delete(live)
    finally:
        await client.delete(session)
    restored = await client.resume(state)
    try:
        await restored.start()
        assert (await restored.exec("cat state.txt; stat -c %a state.txt")).stdout == b"kept\n750\n"
    finally:
        await restored.aclose()
        await client.delete(restored)


async def test_resume_refuses_an_invalid_snapshot_before_clearing_the_live_workspace(
    backend: str, tmp_path: Path
) -> None:
    client, session = await started_with_snapshots(backend, tmp_path)
    try:
        await session.exec("echo live > keep.txt")
        forged = io.BytesIO()
        with tarfile.open(fileobj=forged, mode="w") as tar:
            link = tarfile.TarInfo("link")
            link.type, link.linkname = tarfile.SYMTYPE, "../outside"
            tar.addfile(link)
        forged.seek(0)
        await session.state.snapshot.persist(forged)
        resumed = await client.resume(session.state)
        with pytest.raises(WorkspaceArchiveWriteError) as refused:
            await resumed.start()
        assert "escapes archive root" in str(refused.value.context["reason"])
        assert (await session.exec("ls -A; cat keep.txt")).stdout == b"keep.txt\nlive\n"
    finally:
        await session.aclose()
        await client.delete(session)
