"""Docker-only facts: how the container is configured (read back from `docker inspect`), what a
close or a killed host leaves behind, and the content-addressed image for extra packages.

The behaviour every backend shares (files, limits, timeouts, the attack catalogue) is in the
backend-parametrised suite next to this file.
"""

from __future__ import annotations

import signal
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from coderoom.sandboxes import Limits, SandboxSpec
from coderoom.sandboxes.session import open_session

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("docker_engine")]

LIMITS = Limits(memory="384M", cpus=0.5, pids=64, timeout=20, tmp_size="32M", workspace_size="64M")


@pytest.fixture
async def session() -> AsyncIterator[Any]:
    async with open_session(SandboxSpec(backend="docker", limits=LIMITS)) as s:
        yield s


def _gone(client: Any, container_id: str) -> bool:
    import docker.errors

    try:
        client.containers.get(container_id)
    except docker.errors.NotFound:
        return True
    return False


async def test_container_settings_are_hardened(session: Any, client: Any) -> None:
    attrs = client.api.inspect_container(session.state.container_id)
    host, config = attrs["HostConfig"], attrs["Config"]
    assert config["User"] == "1000:1000"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges"]  # Docker's seccomp profile; ours is stacked inside
    assert host["Privileged"] is False
    assert host["NetworkMode"] == "none"
    assert host["Memory"] == LIMITS.memory == host["MemorySwap"]
    assert host["NanoCpus"] == 500_000_000
    assert host["PidsLimit"] == 64
    assert set(host["Tmpfs"]) == {"/tmp", "/workspace"}
    assert "size=33554432" in host["Tmpfs"]["/tmp"] and "size=67108864" in host["Tmpfs"]["/workspace"]
    # the one mount: /dev/null over resolv.conf, so the host's resolvers are not disclosed
    assert [(m["Source"], m["Destination"], m["RW"]) for m in attrs["Mounts"]] == [
        ("/dev/null", "/etc/resolv.conf", False)]
    assert config["Labels"]["coderoom.sandbox"] == "1"
    assert config["Labels"]["coderoom.session"] == session.state.session_id.hex
    assert "coderoom.created" in config["Labels"]


async def test_no_host_environment(monkeypatch: pytest.MonkeyPatch, client: Any) -> None:
    monkeypatch.setenv("CODEROOM_CANARY_SECRET", "s3cr3t-canary")
    async with open_session(SandboxSpec(backend="docker")) as s:
        env = client.api.inspect_container(s.state.container_id)["Config"]["Env"]
        inside = await s.exec("env")
    assert not any("s3cr3t-canary" in e for e in env)
    assert b"s3cr3t-canary" not in inside.stdout
    assert b"CODEROOM_" not in inside.stdout  # init.py's source and filter are not passed on


async def test_inside_view_matches(session: Any) -> None:
    script = (
        "id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status | tr -s '\\t ' ' ';"
        " touch /etc/x 2>&1 | grep -o 'Read-only file system';"
        " cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '; wc -c < /etc/resolv.conf"
    )
    result = await session.exec(script)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.decode().split("\n")[:-1] == [
        "1000", "CapEff: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2", "Seccomp_filters: 2",
        "Read-only file system", "lo", "0",
    ]


async def test_pid1_is_out_of_the_sandbox_reach(session: Any) -> None:
    """PID 1 carries the command channel: its fds and memory must be closed to sandbox code, and
    a kill from inside must not end the session."""
    probe = await session.exec("ls /proc/1/fd; cat /proc/1/environ; kill -9 1; echo done")
    assert b"Permission denied" in probe.stderr
    assert probe.stdout.strip() == b"done"
    again = await session.exec("echo alive")
    assert again.stdout == b"alive\n"


@pytest.fixture
async def short_session() -> AsyncIterator[Any]:
    async with open_session(SandboxSpec(backend="docker", limits=replace(LIMITS, timeout=2))) as s:
        yield s


async def test_timeout_takes_the_whole_tree(short_session: Any) -> None:
    result = await short_session.exec("setsid sleep 300 & (sleep 301 &); sleep 302")
    assert result.exit_code == 124
    assert b"wall-clock limit" in result.stderr
    left = await short_session.exec("ps -eo args= | grep -c '^sleep 30' || true")
    assert left.stdout.strip() == b"0"


async def test_memory_kill_is_137(client: Any) -> None:
    spec = SandboxSpec(backend="docker", limits=Limits(memory="96M", timeout=30))
    async with open_session(spec) as s:
        result = await s.exec("python3", "-c", "b = bytearray(400 << 20); print(len(b))", shell=False)
        assert result.exit_code == 137
        assert b"[coderoom: stopped by the memory limit (memory = 96M for the whole sandbox)]" in result.stderr
        assert (await s.exec("echo still here")).stdout == b"still here\n"


async def test_close_removes_the_container(client: Any) -> None:
    async with open_session(SandboxSpec(backend="docker")) as s:
        container_id = s.state.container_id
        await s.exec("sleep 60 >/dev/null 2>&1 &")  # a busy container must not delay the close
        started = time.monotonic()
    # a sanity bound, not a benchmark (benchmarks/sandbox_bench.py): the SDK's close waits ~10 s
    assert time.monotonic() - started < 5
    assert _gone(client, container_id)


async def test_a_closed_session_is_not_running(client: Any) -> None:
    """The SDK asks `running()` before writing events into the workspace (WorkspaceJsonlSink):
    a removed container must not answer with the last status docker-py cached."""
    async with open_session(SandboxSpec(backend="docker")) as s:
        assert await s.running()
    assert _gone(client, s.state.container_id)
    assert not await s.running()


_HOST = """
import asyncio, sys
from coderoom.sandboxes import SandboxSpec
from coderoom.sandboxes.session import open_session
async def main():
    async with open_session(SandboxSpec(backend="docker")) as s:
        print(s.state.container_id, flush=True)
        await asyncio.sleep(600)
asyncio.run(main())
"""


def test_killed_host_leaves_nothing(client: Any) -> None:
    host = subprocess.Popen([sys.executable, "-c", _HOST], stdout=subprocess.PIPE, text=True)
    try:
        container_id = host.stdout.readline().strip()  # type: ignore[union-attr]
        assert container_id and not _gone(client, container_id)
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait()
    deadline = time.monotonic() + 20
    while not _gone(client, container_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _gone(client, container_id)


_STARTS_AND_WAITS = """
import asyncio, time
from coderoom.sandboxes import Limits
from coderoom.sandboxes.docker.image import docker_client
from coderoom.sandboxes.docker.session import CoderoomDockerClient
async def main():
    container = await CoderoomDockerClient(docker_client(), limits=Limits(), image="coderoom-sandbox:latest")._create_container(
        "coderoom-sandbox:latest", network_mode="none")
    container.start()
    print(container.id, flush=True)
    time.sleep(600)
asyncio.run(main())
"""


async def test_prune_removes_orphans_and_spares_live_owners(client: Any) -> None:
    """A host killed between starting a container and attaching to it leaves a running
    container; `prune` removes it, and leaves a container whose owner (this test) is alive."""
    from coderoom.sandboxes.docker import prune
    from coderoom.sandboxes.docker.session import CoderoomDockerClient

    mine = await CoderoomDockerClient(client, limits=Limits(), image="coderoom-sandbox:latest")._create_container(
        "coderoom-sandbox:latest", network_mode="none"
    )
    mine.start()
    host = subprocess.Popen([sys.executable, "-c", _STARTS_AND_WAITS], stdout=subprocess.PIPE, text=True)
    try:
        orphan = host.stdout.readline().strip()  # type: ignore[union-attr]
    finally:
        host.kill()
        host.wait()
    try:
        assert orphan and not _gone(client, orphan)
        assert prune(client) >= 1
        assert _gone(client, orphan)
        assert not _gone(client, mine.id), "prune removed a live owner's container"
    finally:
        mine.remove(force=True)


def test_prune_cli_counts(client: Any) -> None:
    # other tests' leftovers (a killed server's sessions) may be recovered first: lines of their own
    done = subprocess.run(["coderoom", "sandbox", "prune"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(re.fullmatch(r"removed \d+ session folders? \(local\)", line) for line in lines), done.stdout
    assert any(re.fullmatch(r"removed \d+ sandbox containers? \(docker\)", line) for line in lines), done.stdout


def test_extra_packages_build_a_cached_image(client: Any) -> None:
    """`numpy` is already in the base, so pip needs no index and the test no network."""
    import docker.errors

    from coderoom.sandboxes.docker.image import (
        DEFAULT_IMAGE,
        PACKAGES_LABEL,
        derived_tag,
        ensure_image,
    )

    spec = SandboxSpec(backend="docker", docker={"packages": ["numpy", " numpy "]})
    tag = derived_tag(client, DEFAULT_IMAGE, ["numpy"])
    try:
        client.images.remove(tag)
    except docker.errors.ImageNotFound:
        pass
    first: list[str] = []
    assert ensure_image(spec, progress=first.append) == tag
    assert any(line.startswith("Step ") for line in first)
    assert client.images.get(tag).labels[PACKAGES_LABEL] == "numpy"
    second: list[str] = []
    assert ensure_image(spec, progress=second.append) == tag
    assert second == []  # found by its content address: no build at all


async def test_derived_image_runs(client: Any) -> None:
    spec = SandboxSpec(backend="docker", docker={"packages": ["numpy"]})
    async with open_session(spec) as s:
        result = await s.exec("python3 -c 'import numpy; print(1)'")
        assert result.stdout == b"1\n"


async def test_declared_packages_from_a_wheel_folder_are_baked_into_a_derived_image(client: Any, tmp_path: Any) -> None:
    """`[sandbox.environment]` on Docker: the same declaration, offline from its find_links
    folder (copied into the build; pip uses no index), in an image cached by content."""
    from support.wheels import make_wheel

    from coderoom.sandboxes.docker.image import ensure_image

    make_wheel(tmp_path / "wheels", "crtinydocker", "0.1.0", "VALUE = 7\n")
    spec = SandboxSpec(backend="docker", environment={"packages": ["crtinydocker"], "find_links": [str(tmp_path / "wheels")]})
    tag = ensure_image(spec)
    try:
        assert ":pkgs-" in tag and ensure_image(spec) == tag
        async with open_session(spec) as s:
            result = await s.exec("python3 -c 'import crtinydocker; print(crtinydocker.VALUE)'")
        assert result.stdout == b"7\n"
    finally:
        client.images.remove(tag, force=True)


def test_package_names_are_plain_requirements() -> None:
    from coderoom.sandboxes.docker.image import ImageBuildError, normalize_packages

    assert normalize_packages(["scipy>=1.10,<2", "pandas[excel]", "numpy", "numpy"]) == [
        "numpy", "pandas[excel]", "scipy>=1.10,<2"]
    for bad in ["--index-url=http://x", "numpy; rm -rf /", "a b", "git+https://x/y", "../x"]:
        with pytest.raises(ImageBuildError):
            normalize_packages([bad])


async def test_files_survive_a_persist_and_hydrate(session: Any) -> None:
    import io
    from pathlib import Path

    await session.write(Path("input/data.csv"), io.BytesIO(b"a,b\n1,2\n"))
    await session.exec("mkdir -p output && cp input/data.csv output/copy.csv && ln -s copy.csv output/l")
    archive = await session.persist_workspace()
    async with open_session(SandboxSpec(backend="docker")) as other:
        await other.hydrate_workspace(archive)
        listing = await other.exec("find . | sort; readlink output/l; cat output/copy.csv")
    assert listing.stdout.decode().split("\n") == [
        ".", "./input", "./input/data.csv", "./output", "./output/copy.csv", "./output/l",
        "copy.csv", "a,b", "1,2", "",
    ]


async def test_each_command_gets_a_fresh_home_that_is_removed(session: Any) -> None:
    first = await session.exec("echo $HOME; mkdir -p ~/.cache/x && touch ~/.cache/x/f && chmod 000 ~/.cache/x ~/.cache")
    second = await session.exec("echo $HOME; stat -c %a $HOME; ls -A $HOME; ls -d /tmp/home-*")
    third = await session.exec("echo $HOME; ls -d /tmp/home-*")
    home = first.stdout.decode().strip()
    assert home.startswith("/tmp/home-")
    lines = second.stdout.decode().split()
    assert lines[0] != home and lines[0].startswith("/tmp/home-")
    assert lines[1:] == ["700", lines[0]]  # the new HOME is empty and this uid's alone, the old one is gone
    own, *listed = third.stdout.decode().split()
    assert listed == [own] != [lines[0]]  # an empty HOME is gone too


async def test_archive_reads_what_sandbox_code_locked(session: Any) -> None:
    """ART-11: a `chmod 000` directory and a mode-000 file are archived with their contents."""
    await session.exec("mkdir -p locked/deep && echo one > locked/deep/f && echo two > secret"
                       " && chmod 000 locked/deep secret locked")
    archive = await session.persist_workspace()
    import tarfile

    with tarfile.open(fileobj=archive) as tar:
        assert tar.extractfile("locked/deep/f").read() == b"one\n"  # type: ignore[union-attr]
        assert tar.extractfile("secret").read() == b"two\n"  # type: ignore[union-attr]


async def test_the_run_record_keeps_the_exact_versions_the_derived_image_installed(client: Any, tmp_path: Any) -> None:
    """As on the local backend: `run_start.environment` lists what the build installed (the
    declared package and its dependency, not the base image's), read from the image without
    starting it."""
    from agents.testing import ScriptedModel, assistant_message
    from support.wheels import make_wheel

    from coderoom.jobs import build_job
    from coderoom.models import ResolvedModel
    from coderoom.record import read_record
    from coderoom.run import run_job
    from coderoom.sandboxes.docker.image import ensure_image

    make_wheel(tmp_path / "wheels", "crlockdocker", "2.0.1", "VALUE = 1\n", requires=["crlockdep"])
    make_wheel(tmp_path / "wheels", "crlockdep", "0.3.0", "VALUE = 2\n")
    environment = {"packages": ["crlockdocker>=2"], "find_links": [str(tmp_path / "wheels")]}
    job = build_job({"name": "lock", "prompt": "p", "sandbox": {"backend": "docker", "environment": environment}})
    model = ResolvedModel(model=ScriptedModel([[assistant_message("done")]]), label="scripted", api="offline",
                          accepts_images=False, tracing_disabled=True)  # fmt: skip
    try:
        result = await run_job(job, run_dir=tmp_path / "run", model=model)
        assert result.ok, result.error
        start = read_record(tmp_path / "run").events[0]
        assert start.environment == {
            "image": ensure_image(job.sandbox),
            "declared": ["crlockdocker>=2"],
            "installed": [{"name": "crlockdep", "version": "0.3.0"}, {"name": "crlockdocker", "version": "2.0.1"}],
        }
        # the reader's container is gone, as is the run's (the engine is shared: only this image's)
        assert client.containers.list(all=True, filters={"ancestor": ensure_image(job.sandbox)}) == []
    finally:
        client.images.remove(ensure_image(job.sandbox), force=True)
