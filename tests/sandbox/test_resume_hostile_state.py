"""A serialized session state is hostile input (docs/security.md, sandbox pass issue 12): an
edited state resumed by the trusted client never names another session's folder (AP-R1), never
brings host files in through its manifest (AP-R3), never chooses where snapshots are read and
written on the host (AP-R4), and (docker) never chooses the image (AP-R2). Each test is the
attack's reproduction from the attack pass, turned around."""

from __future__ import annotations

import io
import os
import secrets
import tarfile
from pathlib import Path

from agents.sandbox import Manifest
from agents.sandbox.snapshot import LocalSnapshotSpec

from coderoom.sandboxes import SandboxSpec, get_backend


async def _closed_state(client, options, snaps: Path) -> dict:  # type: ignore[no-untyped-def]
    """The serialized state of a session that ran once (`kept` in its snapshot)."""
    session = await client.create(manifest=Manifest(), snapshot=LocalSnapshotSpec(base_path=snaps), options=options)
    await session.start()
    await session.exec("echo kept > state.txt")
    await session.aclose()
    await client.delete(session)
    return session.state.model_dump(mode="json")


async def test_an_edited_host_dir_never_adopts_another_live_sessions_folder() -> None:
    """AP-R1: the attacker's state names the victim's folder; resume starts a fresh one, and
    deleting the resumed session leaves the victim's folder and files alone."""
    client, options = get_backend("local").client(SandboxSpec(backend="local"))
    victim = await client.create(manifest=Manifest(), options=options)
    attacker = await client.create(manifest=Manifest(), options=options)
    await victim.start()
    try:
        canary = "CANARY_" + secrets.token_hex(8)
        await victim.exec(f"echo {canary} > victim_secret.txt")
        payload = attacker.state.model_dump(mode="json")
        payload["host_dir"] = victim.state.host_dir
        resumed = await client.resume(client.deserialize_session_state(payload))
        assert resumed.state.host_dir != victim.state.host_dir
        await resumed.start()
        seen = await resumed.exec("cat victim_secret.txt; echo planted > from_attacker.txt")
        assert canary.encode() not in seen.stdout
        await resumed.aclose()
        await client.delete(resumed)
        assert os.path.isdir(victim.state.host_dir)
        listing = await victim.exec("ls -A")
        assert listing.stdout == b"victim_secret.txt\n"
    finally:
        await victim.aclose()
        await client.delete(victim)
        await client.delete(attacker)


async def test_a_resumed_manifest_brings_no_host_file_in(backend: str, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """AP-R3: a LocalFile entry (a `.env` in the host's cwd) added to the state is dropped."""
    canary = "CANARY_" + secrets.token_hex(8)
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={canary}\n")
    monkeypatch.chdir(tmp_path)
    client, options = get_backend(backend).client(SandboxSpec(backend=backend))
    (tmp_path / "snaps").mkdir()
    payload = await _closed_state(client, options, tmp_path / "snaps")
    payload["manifest"]["entries"] = {
        "loot.txt": {"type": "local_file", "src": ".env", "ephemeral": True},
        "d": {"type": "dir", "children": {"loot2": {"type": "local_dir", "src": str(tmp_path)}}},
    }
    resumed = await client.resume(client.deserialize_session_state(payload))
    try:
        await resumed.start()
        seen = await resumed.exec("cat state.txt; cat loot.txt d/loot2/.env 2>&1 || true")
    finally:
        await resumed.aclose()
        await client.delete(resumed)
    assert seen.stdout.startswith(b"kept\n")
    assert canary.encode() not in seen.stdout


async def test_a_resumed_state_never_chooses_where_its_snapshot_lives(backend: str, tmp_path: Path) -> None:
    """AP-R4: a state whose snapshot names another host tar reads nothing from it, and stop
    writes neither to it nor to a new host path; the client's own snapshot is used."""
    canary = "CANARY_" + secrets.token_hex(8)
    host = tmp_path / "host"
    host.mkdir()
    with tarfile.open(host / "victim.tar", "w") as tar:
        info = tarfile.TarInfo("victim_data.txt")
        info.size = len(canary)
        tar.addfile(info, io.BytesIO(canary.encode()))
    client, options = get_backend(backend).client(SandboxSpec(backend=backend))
    (tmp_path / "snaps").mkdir()
    payload = await _closed_state(client, options, tmp_path / "snaps")
    for spec in ({"type": "local", "id": "victim", "base_path": str(host)},
                 {"type": "local", "id": "planted", "base_path": str(host / "new" / "dir")}):  # fmt: skip
        payload["snapshot"] = spec
        resumed = await client.resume(client.deserialize_session_state(payload))
        try:
            await resumed.start()
            seen = await resumed.exec("cat state.txt; cat victim_data.txt 2>&1 || true")
            await resumed.exec("echo sandbox-chosen > written.txt")
        finally:
            await resumed.aclose()
            await client.delete(resumed)
        assert seen.stdout.startswith(b"kept\n")  # the client's own snapshot
        assert canary.encode() not in seen.stdout
    assert tarfile.open(host / "victim.tar").getnames() == ["victim_data.txt"]
    assert not (host / "new").exists()


async def test_a_resumed_docker_state_never_chooses_the_image(tmp_path: Path) -> None:
    """AP-R2: the image of a resumed (new) container is the client's, whatever the state says."""
    from backends import require_backend

    require_backend("docker")
    client, options = get_backend("docker").client(SandboxSpec(backend="docker"))
    payload = await _closed_state(client, options, tmp_path)
    payload["image"] = "busybox:latest"
    resumed = await client.resume(client.deserialize_session_state(payload))
    try:
        await resumed.start()
        assert resumed.state.image == options.image
        container = client.get_container(resumed.state.container_id)
        assert container is not None and options.image in container.image.tags
    finally:
        await resumed.aclose()
        await client.delete(resumed)
