"""Manifest.root is a path inside the sandbox (issue 12): on both backends the workspace is put
there (cwd, files, snapshots) and the host path of that name is never touched; the local sandbox
refuses, at create, roots that collide with what it mounts itself. Also: a manifest PATH does
not stop a sandbox from starting, and a grant without a host path is not a host-path grant."""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path, PurePosixPath

import pytest
from agents.sandbox import Manifest
from backends import require_backend
from agents.sandbox.entries import File
from agents.sandbox.errors import ConfigurationError
from agents.sandbox.manifest import Environment, SandboxPathGrant
from agents.sandbox.snapshot import LocalSnapshotSpec

from coderoom.errors import EXIT_USAGE, UsageError
from coderoom.sandboxes import SandboxSpec, get_backend
from coderoom.sandboxes.local import bwrap
from coderoom.sandboxes.sdk_errors import UnsupportedFeature
from coderoom.sandboxes.session import open_session
from .test_sdk_contract import _mine


def _host_state(path: Path) -> tuple[bool, list[str]]:
    """Whether `path` exists on the host, and its listing (what a session must not change)."""
    return path.exists(), sorted(os.listdir(path)) if path.is_dir() else []


@pytest.fixture(params=["var-tmp", "srv"])
def root(request: pytest.FixtureRequest) -> str:
    """A root under /var/tmp that no host folder has (it must stay absent), or /srv/ws."""
    if request.param == "srv":
        return "/srv/ws"
    return f"/var/tmp/coderoom-root-{uuid.uuid4().hex[:12]}/ws"


async def test_the_workspace_is_at_the_root_inside_the_sandbox_and_the_host_path_is_untouched(
    backend: str, root: str, tmp_path: Path
) -> None:
    host = Path(root)
    before = _host_state(host), _host_state(host.parent)
    client, options = get_backend(backend).client(SandboxSpec(backend=backend))
    manifest = Manifest(root=root, entries={"input/data.txt": File(content=b"from the manifest\n")})
    session = await client.create(manifest=manifest, snapshot=LocalSnapshotSpec(base_path=tmp_path), options=options)
    await session.start()
    try:
        ran = await session.exec(
            f"pwd; cat input/data.txt; echo made > made.txt; ln -s {root}/made.txt {root}/link.txt; cat {root}/link.txt"
        )
        assert ran.exit_code == 0, ran.stderr
        assert ran.stdout == f"{root}\nfrom the manifest\nmade\n".encode()
        await session.write(Path(f"{root}/sub/absolute.txt"), io.BytesIO(b"absolute"))
        await session.write(Path("relative.txt"), io.BytesIO(b"relative"))
        assert (await session.read(Path(f"{root}/made.txt"))).read() == b"made\n"
        assert (await session.read(Path("sub/absolute.txt"))).read() == b"absolute"
        assert (await session.exec(f"cat {root}/relative.txt")).stdout == b"relative"
        assert (_host_state(host), _host_state(host.parent)) == before  # never the host's path
        await session.aclose()  # persists the snapshot: the in-workspace link is rebased on `root`
        state = session.state
    finally:
        await client.delete(session)
    restored = await client.resume(state)
    try:
        await restored.start()
        again = await restored.exec("pwd; readlink link.txt; cat link.txt sub/absolute.txt")
        assert again.stdout == f"{root}\nmade.txt\nmade\nabsolute".encode()  # rebased: under `root`
    finally:
        await restored.aclose()
        await client.delete(restored)
    assert (_host_state(host), _host_state(host.parent)) == before


_FORBIDDEN = sorted(
    {"/", "/tmp/ws", "/dev/shm/ws", "/proc/ws", "/sys/ws", "/dev", "/usr/local/ws", "/etc/ws", "/bin/ws",
     "/sbin", "/lib/ws", "/lib64/ws", "/run/ws", "/opt", "/opt/coderoom/python/ws", "/opt/coderoom/venv",
     "relative/ws", "/srv/../etc", "/srv//ws", "/srv\\ws", "/srv/" + "n" * 256, "/srv" * 1024,
     *bwrap.SANDBOX_PATHS, bwrap.RUNTIME_MOUNT, bwrap.VENV_MOUNT}
)  # fmt: skip


@pytest.mark.parametrize("forbidden", _FORBIDDEN, ids=lambda root: root[:40])
async def test_local_refuses_roots_that_collide_with_its_own_mounts_at_create(forbidden: str) -> None:
    client, options = get_backend("local").client(SandboxSpec(backend="local"))
    before = _mine("local")
    with pytest.raises(UnsupportedFeature) as caught:
        await client.create(manifest=Manifest(root=forbidden), options=options)
    assert isinstance(caught.value, ConfigurationError) and isinstance(caught.value, ValueError)
    assert caught.value.exit_code == EXIT_USAGE
    message = str(caught.value)
    assert f"the workspace root {forbidden!r}" in message and "never a host path" in message
    assert _mine("local") == before  # refused before any session folder exists
    from coderoom.sandboxes.local.sandbox import LocalSandbox

    bw = bwrap.probe()[0]
    assert bw is not None
    with pytest.raises(UsageError) as core:  # the core refuses it too, for callers without the SDK
        LocalSandbox(SandboxSpec().limits, bw, Path("/nonexistent"), root=forbidden)
    assert core.value.exit_code == EXIT_USAGE


def test_sandbox_paths_cover_every_mount_but_the_workspace(tmp_path: Path) -> None:
    """SANDBOX_PATHS is what `root_problem` keeps roots clear of: every destination bwrap's
    command line (and the launcher's data files) names must be under one of them."""
    from coderoom.sandboxes.local import spawn
    from coderoom.sandboxes.local.sandbox import LocalSandbox

    bw = bwrap.probe()[0]
    assert bw is not None
    sandbox = LocalSandbox(SandboxSpec().limits, bw, tmp_path, root="/srv/ws")
    args = sandbox._bwrap_args()
    takes_dest = {"--ro-bind": 2, "--bind": 2, "--symlink": 2, "--tmpfs": 1, "--proc": 1, "--dev": 1, "--remount-ro": 1}
    dests = [args[i + takes_dest[a]] for i, a in enumerate(args) if a in takes_dest]
    dests += [spawn.LAUNCHER_PATH, spawn.SECCOMP_PATH, spawn.SETTINGS_PATH, *sandbox._root_files()]
    assert "/srv/ws" in dests and "--chdir" in args and args[args.index("--chdir") + 1] == "/srv/ws"
    outside = [
        d for d in dests
        if d not in ("/srv/ws", "/") and not any(Path(d).is_relative_to(own) for own in bwrap.SANDBOX_PATHS)
    ]  # fmt: skip
    assert outside == []


async def test_a_manifest_path_reaches_commands_on_local_and_not_its_helpers() -> None:
    manifest = Manifest(environment=Environment(value={"PATH": "/nonexistent"}))
    async with open_session(SandboxSpec(backend="local"), manifest) as session:
        seen = await session.exec("/bin/sh", "-c", 'echo "$PATH"; echo made > note.txt', shell=False)
        assert seen.stdout == b"/nonexistent\n", seen.stderr
        assert (await session.read(Path("note.txt"))).read() == b"made\n"


async def test_a_container_path_without_python_does_not_stop_the_docker_sandbox() -> None:
    """The environment a manifest gives the container (PATH included) is every process's: PID 1
    and the file helper start python3 by absolute path, not through it. Before, Docker looked
    the entrypoint up in that PATH and create failed with APIError 400. (The SDK's own start
    runs `sh` through PATH, so this drives the core with the environment the SDK client gives.)"""
    require_backend("docker")
    from coderoom.sandboxes.docker.container import DockerSandbox, create_container, seccomp_program
    from coderoom.sandboxes.docker.image import docker_client, ensure_image
    from coderoom.sandboxes.docker.request import create_request

    spec = SandboxSpec(backend="docker")
    client = docker_client()
    request = create_request(
        spec.limits, image=ensure_image(spec), program=seccomp_program(client), environment={"PATH": "/nonexistent"}
    )
    container_id = create_container(client, request)
    sandbox = DockerSandbox(client, container_id, spec.limits)
    try:
        client.api.start(container_id)
        seen = await sandbox.exec(["/bin/sh", "-c", 'echo "$PATH"; echo made > note.txt'])
        assert seen.stdout == b"/nonexistent\n", seen.stderr
        assert await sandbox.read_file(PurePosixPath("note.txt"), max_bytes=64) == b"made\n"
    finally:
        await sandbox.close()


async def test_a_grant_without_a_host_path_is_not_refused_as_a_host_path(backend: str, tmp_path: Path) -> None:
    client, options = get_backend(backend).client(SandboxSpec(backend=backend))
    with pytest.raises(UnsupportedFeature, match="host_path"):
        grant = SandboxPathGrant(path="/srv/data", host_path=str(tmp_path))
        await client.create(manifest=Manifest(extra_path_grants=(grant,)), options=options)
    manifest = Manifest(extra_path_grants=(SandboxPathGrant(path="/srv/data", read_only=True),))
    if backend == "local":  # its file operations reach the workspace only: refused, for that reason
        with pytest.raises(UnsupportedFeature) as caught:
            await client.create(manifest=manifest, options=options)
        assert "host" not in str(caught.value) and "workspace only" in str(caught.value)
        return
    session = await client.create(manifest=manifest, options=options)  # a path in the container
    try:
        await session.start()
        assert (await session.exec("pwd")).stdout == b"/workspace\n"
    finally:
        await session.aclose()
        await client.delete(session)


async def test_the_kernel_and_the_output_checks_work_at_the_root(backend: str) -> None:
    """run_python's kernel starts in the workspace (its cwd is the root) and the required-output
    check, written and run inside the sandbox by relative path, finds what was made there."""
    from coderoom.artifacts import check_in_session
    from coderoom.jobs import OutputSpec
    from coderoom.tools.python_kernel import RunPythonTool

    async with open_session(SandboxSpec(backend=backend), Manifest(root="/srv/ws")) as session:
        tool = RunPythonTool(session, images=False, timeout=20)
        out = await tool.run("import os\nos.makedirs('output')\nopen('output/r.md', 'w').write('# r')\nos.getcwd()")
        assert "[Out 1]\n'/srv/ws'" in out, out
        checks = await check_in_session(session, [OutputSpec(path="output/r.md"), OutputSpec(path="output/none.md")])
    assert [check.ok for check in checks] == [True, False], checks


@pytest.mark.parametrize("tty", [False, True])
async def test_live_processes_and_terminals_start_at_the_root(backend: str, tty: bool) -> None:
    async with open_session(SandboxSpec(backend=backend), Manifest(root="/srv/ws")) as session:
        update = await session.pty_exec_start("pwd", shell=False, tty=tty, yield_time_s=5)
        assert update.exit_code == 0 and b"/srv/ws" in update.output, update
