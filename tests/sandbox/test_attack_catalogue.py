"""The attack catalogue against each backend: the SAFE outcome of every case that applies.

One-command cases are data (probes.py); cases that need several steps, host-side checks or
special limits are the functions below. Every output is grepped for the host canaries.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agents.sandbox.errors import (
    InvalidManifestPathError,
    WorkspaceArchiveReadError,
    WorkspaceReadNotFoundError,
)

from coderoom.sandboxes import Limits, SandboxSpec, SandboxUnavailable
from coderoom.sandboxes.session import open_session

from .hostside import host_processes_with
from .probes import BY_ID, PROBES, Canaries, run_probe

MARK = Canaries.MARK


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with Canaries(tmp_path_factory.mktemp("canaries")) as planted:
        yield planted


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
async def test_probe(backend: str, probe, tokens: dict[str, str]) -> None:
    run = await run_probe(backend, probe, tokens)
    assert not run.leaked(), f"canary leaked: {run.stdout!r} {run.stderr!r}"
    assert probe.passes(backend, run.stdout), (
        f"{probe.id} ({probe.title}): expected {probe.expected(backend)!r}, got exit {run.exit_code}, "
        f"stdout {run.stdout.strip()!r}, stderr {run.stderr.strip()[-500:]!r}"
    )


BASELINE = [p for p in PROBES if p.baseline]


@pytest.fixture(scope="module")
def baseline_tokens(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Separate canaries: the unconfined baseline really does write to its host files."""
    with Canaries(tmp_path_factory.mktemp("baseline-canaries")) as planted:
        yield planted


@pytest.mark.parametrize("probe", BASELINE, ids=[p.id for p in BASELINE])
async def test_probe_sees_the_leak_on_unconfined_baseline(probe, baseline_tokens: dict[str, str]) -> None:
    """The SDK's unix_local is unconfined: each probe must detect that, or it proves nothing."""
    run = await run_probe("unix_local", probe, baseline_tokens)
    assert run.leaked() or not probe.passes("unix_local", run.stdout), run.stdout


def test_host_untouched_after_probes(tokens: dict[str, str]) -> None:
    """FS-01/FS-03 host side: the victim is unchanged, and nothing appeared in host /tmp, /dev/shm."""
    assert Path(tokens["HOME"], "victim.txt").read_text() == "untouched\n"
    assert not Path(f"/tmp/cr-{tokens['NONCE']}").exists()
    assert not Path(f"/dev/shm/cr-{tokens['NONCE']}").exists()


def _spec(backend: str, **limits: object) -> SandboxSpec:
    return SandboxSpec(backend=backend, limits=Limits(**limits))  # type: ignore[arg-type]


async def test_sec16_no_residue_between_sessions(backend: str) -> None:
    async with open_session(_spec(backend)) as a:
        await a.exec("echo sk-canary-A > /tmp/x; echo sk-canary-A > /dev/shm/x; (sleep 60 &)")
    async with open_session(_spec(backend)) as b:
        result = await b.exec("cat /tmp/x /dev/shm/x 2>&1; ls /proc | grep -c '^[0-9]'")
    assert MARK not in result.stdout.decode()


async def test_fs06_staging_paths_cannot_leave_the_workspace(backend: str, tmp_path: Path) -> None:
    async with open_session(_spec(backend)) as session:
        for name in ("../escape.txt", "/etc/cron.d/x", "a/../../b"):
            with pytest.raises(InvalidManifestPathError):
                await session.write(Path(name), io.BytesIO(b"x"))
        listing = await session.exec("ls -a /workspace /etc/cron.d 2>&1")
    assert b"escape" not in listing.stdout


async def test_proc05_daemonised_orphan_dies_with_its_command(backend: str) -> None:
    marker = f"cr-orphan-{os.getpid()}"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n"
        f"    if os.fork() == 0:\n        os.execvp('sh', ['sh', '-c', 'while :; do date >> hb; sleep .1; done', '{marker}'])\n"
        "    os._exit(0)\ntime.sleep(0.5)\n"
    )
    async with open_session(_spec(backend)) as session:
        await session.exec("python3", "-c", code, shell=False)
        await asyncio.sleep(0.3)
        before = (await session.read(Path("hb"))).read()
        await asyncio.sleep(0.5)
        after = (await session.read(Path("hb"))).read()
    assert before == after, "the orphan kept writing after its command returned"
    assert host_processes_with(marker) == []


@pytest.mark.parametrize(
    "case, code",
    [
        ("PROC-06", "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass"),
        ("RES-05", "while True: pass"),
        ("RES-06", "import time\ntime.sleep(10**6)"),
    ],
)
async def test_wall_clock_kills_the_whole_tree(backend: str, case: str, code: str) -> None:
    marker = f"cr-{case}-{os.getpid()}"
    tree = f"import os\nos.fork() == 0 and os.execvp('sh', ['sh', '-c', 'sleep 1000; :', '{marker}'])\n{code}"
    async with open_session(_spec(backend, timeout=1.5)) as session:
        started = time.monotonic()
        result = await session.exec("python3", "-c", tree, shell=False)
        elapsed = time.monotonic() - started
    assert result.exit_code == 124
    assert elapsed < 1.5 + 3
    assert host_processes_with(marker) == []


async def test_res08_disk_filling_is_stopped(backend: str) -> None:
    code = "i = 0\nwhile True:\n    open(f'f{i}', 'wb').write(b'\\0' * 2**20)\n    i += 1"
    async with open_session(_spec(backend, workspace_size="8M", timeout=30)) as session:
        result = await session.exec("python3", "-c", code, shell=False)
    assert result.exit_code not in (0, 124), "the writer must be stopped before the deadline"
    assert b"workspace" in result.stderr or b"No space" in result.stderr


async def test_res12_output_is_capped_in_the_host(backend: str) -> None:
    cap = 64 * 1024
    async with open_session(_spec(backend, output_bytes=cap)) as session:
        result = await session.exec("python3", "-c", "import sys\nsys.stdout.write('A' * 20_000_000)", shell=False)
    assert len(result.stdout) < cap + 200
    assert b"truncated" in result.stdout


async def test_art01_art02_links_to_host_files_never_yield_host_bytes(backend: str, tokens: dict[str, str]) -> None:
    home = tokens["HOME"]
    async with open_session(_spec(backend)) as session:
        await session.exec(
            f"mkdir out && ln -s {home}/.ssh/id_rsa out/report.txt && ln -s /etc/passwd out/passwd"
            f" && ln -s ../../../../../../../..{home}/.ssh out/cfg && ln -s a out/a"
        )
        with pytest.raises((WorkspaceReadNotFoundError, WorkspaceArchiveReadError, InvalidManifestPathError)):
            await session.read(Path("out/report.txt"))
        archive = await session.persist_workspace()
        data = archive.read()
    assert MARK.encode() not in data
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        links = {m.name: m for m in tar.getmembers() if m.name.startswith("out/")}
    assert all(m.issym() for m in links.values()), "links must stay links, never be dereferenced"


async def test_art03_fifo_does_not_hang_the_host(backend: str) -> None:
    async with open_session(_spec(backend)) as session:
        await session.exec("mkfifo results.csv")
        # refused at once as "not a file", never a read that blocks until the caller gives up
        with pytest.raises(WorkspaceReadNotFoundError):
            await asyncio.wait_for(session.read(Path("results.csv")), 10)
        archive = await asyncio.wait_for(session.persist_workspace(), 10)
        with tarfile.open(fileobj=archive) as tar:
            assert all(not m.isfifo() for m in tar.getmembers())


async def test_art06_deep_tree_is_a_clean_error_and_cleanup_survives(backend: str) -> None:
    deep = "import os\nos.mkdir('out'); os.chdir('out')\nfor _ in range(1100):\n    os.mkdir('d'); os.chdir('d')"
    async with open_session(_spec(backend)) as session:
        result = await session.exec("python3", "-c", deep, shell=False)
        assert result.exit_code == 0 or b"deeper than" in result.stderr, result.stderr
        try:  # an archive, or a clean error: never RecursionError
            (await session.persist_workspace()).close()
        except WorkspaceArchiveReadError:
            pass
    # leaving open_session deleted the workspace: a RecursionError would have surfaced here


async def test_art11_modes_are_normalised_in_the_archive(backend: str) -> None:
    async with open_session(_spec(backend)) as session:
        await session.exec("touch tool && chmod 4755 tool && mkdir locked && chmod 000 locked")
        archive = await session.persist_workspace()
    with tarfile.open(fileobj=archive) as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
    assert modes["tool"] & 0o7000 == 0
    assert modes["locked"] & 0o700 == 0o700


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    out.seek(0)
    return out


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


TAR_CASES = {
    "TAR-01": [(_member("../escaped.txt"), b"x")],
    "TAR-02": [(_member("/tmp/cr-tar02-abs.txt"), b"x")],
    "TAR-03": [(_member("link", tarfile.SYMTYPE, "../victimdir"), None), (_member("link/pwned.txt"), b"x")],
    "TAR-04": [(_member("hl", tarfile.LNKTYPE, "../victimdir/victim.txt"), None)],
    "TAR-05": [(_member("dev", tarfile.CHRTYPE), None), (_member("fifo", tarfile.FIFOTYPE), None),
               (_member("suid", mode=0o4755), b"#!/bin/sh\n")],
}


@pytest.mark.parametrize("case", sorted(TAR_CASES))
async def test_tar_hydrate_refuses_escapes(backend: str, case: str, tmp_path: Path) -> None:
    """TAR-01..05 through hydrate_workspace: nothing outside, no links, no specials, no setuid."""
    async with open_session(_spec(backend)) as session:
        try:
            await session.hydrate_workspace(_tar(*TAR_CASES[case]))
        except Exception:
            pass  # refusing the whole archive is also safe
        found = await session.exec(
            "find / -xdev \\( -name escaped.txt -o -name pwned.txt -o -name cr-tar02-abs.txt \\) 2>/dev/null;"
            " find /workspace \\( -type l -o -type p -o -type c -o -perm -4000 \\) 2>/dev/null"
        )
    assert found.stdout.strip() in (b"", b"/workspace/tmp/cr-tar02-abs.txt"), found.stdout
    assert not Path("/tmp/cr-tar02-abs.txt").exists()


async def test_name01_name04_odd_names_survive_the_archive(backend: str) -> None:
    async with open_session(_spec(backend)) as session:
        await session.exec("python3", "-c", "open('a\\nb.txt', 'w'); open(b'\\xff\\xfe.bin', 'w')", shell=False)
        archive = await session.persist_workspace()
    with tarfile.open(fileobj=archive) as tar:
        assert "a\nb.txt" in tar.getnames()


async def test_ses02_startup_files_from_one_step_do_not_run_in_the_next(backend: str) -> None:
    async with open_session(_spec(backend)) as session:
        await session.exec("echo 'echo PWNED' >> ~/.profile; echo 'echo PWNED' >> /workspace/.profile")
        result = await session.exec("sh -lc true; bash -lc true 2>/dev/null; true")
    assert b"PWNED" not in result.stdout


async def test_ses03_workspace_code_runs_only_inside_the_filter(backend: str) -> None:
    site = "print('SITE', open('/proc/self/status').read().split('Seccomp:')[1].split()[0])"
    async with open_session(_spec(backend)) as session:
        await session.write(Path("sitecustomize.py"), io.BytesIO(site.encode()))
        await session.write(Path("x.pth"), io.BytesIO(f"import os; {site}".encode()))
        result = await session.exec("python3 -c 'print(1)'; PYTHONPATH=/workspace python3 -c pass")
    sites = [line.split()[1] for line in result.stdout.decode().splitlines() if line.startswith("SITE")]
    assert sites, f"the probe never ran, so it proves nothing: {result.stdout!r} {result.stderr!r}"
    assert all(mode == "2" for mode in sites), "workspace code ran before the seccomp filter"


def test_ses04_sandbox_dies_with_its_harness(backend: str, harness_tmpdir: Path) -> None:
    marker = f"cr-ses04-{os.getpid()}"
    harness = subprocess.Popen(
        [sys.executable, "-c", "from coderoom.cli import app; app()", "sandbox", "run", "--sandbox", backend,
         "--timeout", "60", "--", "sh", "-c", "sleep 1000; :", marker],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(harness_tmpdir)},
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(marker), "the sandboxed command never started"
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    deadline = time.monotonic() + 10
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host_processes_with(marker) == []


PLANT_HOOKS = (
    "mkdir -p .git sub/.GIT && printf '[core]\\n\\tfsmonitor = \"touch /tmp/PWNED; false\"\\n' > .git/config"
    " && cp .git/config sub/.GIT/config && echo 'echo pwned' > .envrc && echo 'import os' > evil.pth"
    " && echo made > result.txt"
)


@pytest.mark.parametrize("copy_back_all", [False, True], ids=["default", "copy-back-all"])
def test_art10_copy_back_leaves_out_hooks_the_sandbox_planted(backend: str, tmp_path: Path, copy_back_all: bool) -> None:
    """`sandbox run --workspace` writes what the sandbox chose into a host folder: a `.git/config`
    with core.fsmonitor would run on the next host `git status`, an `.envrc` on the next `cd`."""
    flag = ["--copy-back-all"] if copy_back_all else []
    done = subprocess.run(
        [sys.executable, "-m", "coderoom", "sandbox", "run", "--sandbox", backend, "--workspace", str(tmp_path),
         *flag, "--", "sh", "-c", PLANT_HOOKS],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "result.txt").read_text() == "made\n"  # ordinary output still comes back
    planted = [".git/config", "sub/.GIT/config", ".envrc", "evil.pth"]
    if copy_back_all:
        assert all((tmp_path / name).is_file() for name in planted)
        assert "not copied out" not in done.stderr
    else:
        assert [name for name in planted if (tmp_path / name).exists()] == []
        assert not (tmp_path / ".git").exists() and not (tmp_path / "sub" / ".GIT").exists()
        skipped = [line for line in done.stderr.splitlines() if line.startswith("coderoom: not copied out:")]
        assert sorted(line.split("'")[1] for line in skipped) == [".envrc", ".git", "evil.pth", "sub/.GIT"]
        assert "--copy-back-all" in done.stderr


PLANT_BARE_REPO = (
    "mkdir -p sub/objects/info sub/refs/heads objects refs && printf 'ref: refs/heads/main\\n' > sub/HEAD && "
    "printf '[core]\\n\\tbare = true\\n\\tpager = echo PLANTED\\n' > sub/config && cp sub/HEAD sub/config . && "
    "echo kept > sub/notes.txt"
)


def test_copy_back_leaves_out_an_implicit_bare_repository(backend: str, tmp_path: Path) -> None:
    """Attack A02: HEAD, config, objects/ and refs/ make any folder a repository to git (its
    config's core.pager then runs on `git diff`), whatever the folder is called; at the root too."""
    done = subprocess.run(
        [sys.executable, "-m", "coderoom", "sandbox", "run", "--sandbox", backend, "--workspace", str(tmp_path),
         "--", "sh", "-c", PLANT_BARE_REPO],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sub" / "notes.txt").read_text() == "kept\n"  # the folder's other files come back
    for folder in (tmp_path / "sub", tmp_path):
        assert not any((folder / name).exists() for name in ("HEAD", "config", "objects", "refs")), folder
    git = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=tmp_path / "sub", capture_output=True, text=True,
                         env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)})  # fmt: skip
    assert git.returncode != 0, git.stdout  # host git sees no repository there
    assert "git would take for a repository" in done.stderr


def test_ses05_fails_closed_without_bubblewrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Local only: no working bwrap means a clear refusal, never an unsandboxed run."""
    from coderoom.sandboxes import local
    from coderoom.sandboxes.local import bwrap

    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bwrap, "_candidates", lambda: [str(fake)])
    bwrap.probe.cache_clear()
    try:
        reason = local.backend.unavailable_reason(_spec("local"))
        assert reason is not None and "user namespaces" in reason and "docker" in reason
        with pytest.raises(SandboxUnavailable):
            local.backend.client(_spec("local"))

        async def attempt() -> None:
            async with open_session(_spec("local")):
                pass

        with pytest.raises(SandboxUnavailable):
            asyncio.run(attempt())
    finally:
        monkeypatch.undo()
        bwrap.probe.cache_clear()


def test_catalogue_ids_exist_in_the_catalogue(shared_dir: Path) -> None:
    text = (shared_dir / "security" / "attack-catalogue.md").read_text()
    for case in [*BY_ID, *TAR_CASES]:
        assert f"**{case} —" in text, case


async def test_a_read_through_a_symlink_stays_in_the_workspace_and_in_its_bound(backend: str) -> None:
    """Attack A01: a symlink to /proc/self/pagemap (a "regular" file of ~256 GiB) read through
    view_image's bounded read made the host buffer 3x workspace_size. A read through a link
    resolves inside the sandbox, only to a regular file under /workspace, and stops at the
    caller's bound there."""
    def rss_mib() -> float:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024

    async with open_session(_spec(backend, workspace_size="400M")) as session:
        await session.exec("ln -s /proc/self/pagemap pagemap.png && head -c 3000000 /dev/zero > big && ln -s big link")
        before = rss_mib()
        with pytest.raises((WorkspaceReadNotFoundError, WorkspaceArchiveReadError)):
            await session.read_bounded(Path("pagemap.png"), max_bytes=10 * 1024**2)
        assert rss_mib() - before < 32
        prefix = await session.read_bounded(Path("link"), max_bytes=1000)  # a prefix, as the SDK says
        assert prefix == b"\0" * 1000
