"""What an analysis needs from a sandbox, and every limit firing at its configured value."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agents.sandbox import Manifest
from agents.sandbox.entries import File
from agents.sandbox.snapshot import LocalSnapshotSpec

from coderoom.sandboxes import Limits, SandboxSpec, get_backend
from coderoom.sandboxes.session import open_session

CSV = b"timestamp,energy_kwh,outdoor_temp_c\n2024-01-01T00:00,10.5,3.2\n2024-01-01T01:00,99.0,3.1\n"


def _spec(backend: str, **limits: object) -> SandboxSpec:
    return SandboxSpec(backend=backend, limits=Limits(**limits))  # type: ignore[arg-type]


async def test_pandas_and_matplotlib_write_a_plot(backend: str) -> None:
    manifest = Manifest(entries={"input/building_energy.csv": File(content=CSV)})
    script = (
        "import pandas as pd, matplotlib.pyplot as plt, os\n"
        "df = pd.read_csv('input/building_energy.csv')\n"
        "os.makedirs('output', exist_ok=True)\n"
        "df.plot(x='timestamp', y='energy_kwh').get_figure().savefig('output/energy.png')\n"
        "print(df.energy_kwh.max())"
    )
    async with open_session(_spec(backend), manifest) as session:
        result = await session.exec("python3", "-c", script, shell=False)
        assert result.exit_code == 0, result.stderr
        assert result.stdout.strip() == b"99.0"
        png = (await session.read(Path("output/energy.png"))).read()
    assert png.startswith(b"\x89PNG")


async def test_workspace_is_the_cwd_and_files_persist_across_commands(backend: str) -> None:
    async with open_session(_spec(backend)) as session:
        first = await session.exec("pwd; echo kept > note.txt; echo lost > /tmp/scratch")
        second = await session.exec("cat note.txt; cat /workspace/note.txt")
        assert first.stdout.splitlines()[0] == b"/workspace"
        assert second.stdout == b"kept\nkept\n"
        await session.write(Path("from_host.txt"), io.BytesIO(b"host"))
        assert (await session.exec("cat from_host.txt")).stdout == b"host"


async def test_persist_hydrate_resume_round_trip(backend: str, tmp_path: Path) -> None:
    async with open_session(_spec(backend)) as first:
        await first.exec("mkdir -p a/b && echo one > a/b/f.txt && echo two > top.txt")
        archive = await first.persist_workspace()
    async with open_session(_spec(backend)) as second:
        await second.hydrate_workspace(archive)
        result = await second.exec("cat a/b/f.txt top.txt")
    assert result.stdout == b"one\ntwo\n"

    # the SDK lifecycle: stop() persists to the snapshot, resume() + start() restores it
    backend_obj = get_backend(backend)
    client, options = backend_obj.client(_spec(backend))
    snapshot = LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    session = await client.create(manifest=Manifest(), snapshot=snapshot, options=options)
    await session.start()
    await session.exec("echo resumed > state.txt")
    await session.aclose()
    state = session.state
    await client.delete(session)
    resumed = await client.resume(state)
    try:
        await resumed.start()
        assert (await resumed.exec("cat state.txt")).stdout == b"resumed\n"
    finally:
        await resumed.aclose()
        await client.delete(resumed)


async def test_timeout_fires(backend: str) -> None:
    async with open_session(_spec(backend, timeout=1)) as session:
        result = await session.exec("sleep 30")
    assert result.exit_code == 124


async def test_memory_limit_fires(backend: str) -> None:
    code = (
        "try:\n    a = bytearray(200 * 2**20)\n    print('200M ok', flush=True)\n    b = bytearray(400 * 2**20)\n"
        "    print('600M ok')\nexcept MemoryError:\n    print('MemoryError')"
    )
    async with open_session(_spec(backend, memory="512M")) as session:
        result = await session.exec("python3", "-c", code, shell=False)
    assert b"200M ok" in result.stdout
    assert b"MemoryError" in result.stdout or result.exit_code == 137


async def test_pids_limit_fires(backend: str) -> None:
    code = (
        "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30)\n"
        "            os._exit(0)\n        n += 1\nexcept BlockingIOError:\n    print(n)"
    )
    async with open_session(_spec(backend, pids=20)) as session:
        result = await session.exec("python3", "-c", code, shell=False)
    assert 10 <= int(result.stdout) < 20  # the limit counts the sandbox's other tasks too


async def test_file_size_limit_fires(backend: str) -> None:
    async with open_session(_spec(backend, file_size="1M")) as session:
        ok = await session.exec("head -c 1048576 /dev/zero > exact && wc -c < exact")
        over = await session.exec("head -c 1048577 /dev/zero > over")
    assert ok.stdout.strip() == b"1048576"
    assert over.exit_code == 128 + 25  # SIGXFSZ


async def test_output_is_truncated_with_a_marker(backend: str) -> None:
    async with open_session(_spec(backend, output_bytes=1000)) as session:
        result = await session.exec("head -c 5000 /dev/zero | tr '\\0' A; echo; echo END")
    assert b"[... truncated" in result.stdout
    assert result.stdout.startswith(b"A" * 400) and result.stdout.endswith(b"END\n")


async def test_workspace_size_limit_fires(backend: str) -> None:
    async with open_session(_spec(backend, workspace_size="4M")) as session:
        fits = await session.exec("head -c 3000000 /dev/zero > a")
        over = await session.exec("head -c 2000000 /dev/zero > b")
    assert fits.exit_code == 0
    assert over.exit_code != 0 and (b"workspace" in over.stderr or b"No space left" in over.stderr)


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-c", "from coderoom.cli import app; app()", "sandbox", "run", *args],
        capture_output=True,
        timeout=120,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    "argv, code",
    [
        (["--", "true"], 0),
        (["--", "sh", "-c", "exit 7"], 7),
        (["--timeout", "1", "--", "sleep", "30"], 124),
        (["--", "sh", "-c", "kill -9 $$"], 137),
    ],
)
def test_cli_exit_codes(backend: str, argv: list[str], code: int) -> None:
    assert _cli("--sandbox", backend, *argv).returncode == code


def test_cli_workspace_copy_in_and_out(backend: str, tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("hello\n")
    done = _cli("--sandbox", backend, "--workspace", str(tmp_path), "--", "sh", "-c",
                "cat in.txt; mkdir out; echo made > out/new.txt; ln -s /etc/passwd out/link")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"hello\n"
    assert (tmp_path / "out" / "new.txt").read_text() == "made\n"
    assert not (tmp_path / "out" / "link").exists()  # links are not copied out
    assert b"not copied out" in done.stderr


def test_cli_memory_option(backend: str) -> None:
    done = _cli("--sandbox", backend, "--memory", "256M", "--", "python3", "-c",
                "bytearray(512 * 2**20)")  # fmt: skip
    assert done.returncode in (1, 137)
    if done.returncode == 1:
        assert b"MemoryError" in done.stderr


async def test_client_delete_removes_hostile_trees(tmp_path: Path) -> None:
    """Local only: the host directory goes, whatever the sandbox left in it."""
    from coderoom.sandboxes.local.session import LocalSandboxSession

    async with open_session(_spec("local")) as session:
        script = (
            "import os\nos.makedirs('ro/sub'); os.symlink('/etc', 'link'); os.mkfifo('fifo')\n"
            "os.chmod('ro/sub', 0); os.chmod('ro', 0o500)\nos.mkdir('deep'); os.chdir('deep')\n"
            "for _ in range(1100):\n    os.mkdir('d'); os.chdir('d')"
        )
        result = await session.exec("python3", "-c", script, shell=False)
        assert b"deeper than 256 levels" in result.stderr  # the workspace check refuses it
        inner = session._inner
        assert isinstance(inner, LocalSandboxSession)
        host_dir = inner.host_dir
        from coderoom.sandboxes.local import bwrap
        from coderoom.sandboxes.local.host_dir import SHARED_MODE

        # private: ours alone (as root, bwrap's uid's group may only traverse it: issue 19)
        assert os.stat(host_dir).st_mode & 0o777 == (0o700 if bwrap.host_id() is None else SHARED_MODE)
    assert not host_dir.exists()
    assert Path("/etc/passwd").exists()
