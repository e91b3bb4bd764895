"""Package environment pass (attackenv, 2026-12-06): declared package environments, P1-P6.

From inside a local sandbox with a package environment: the environment (a host cache folder
bound read-only as the venv's site-packages) cannot be changed by any path the sandbox has to it
(/proc/self/fd, renames of its parents, bytecode caches, metadata), so the next session and the
next build see what was built. From a job file: a requirement is a name, never a file, and no
index credential is written into the run record."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from backends import require_backend
from support.wheels import make_wheel

from coderoom.sandboxes import requirements
from coderoom.sandboxes.local import packages
from coderoom.sandboxes.spec import EnvironmentSpec, SandboxSpec


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty environment cache of the test's own."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(packages.CACHE_VARIABLE, str(folder))
    return folder


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's one find-links folder with crtiny: its listing is part of an environment's
    key, so the tests that build crtiny from it find the same environment (`built_cache`)."""
    folder = tmp_path_factory.mktemp("wheels")
    make_wheel(folder, "crtiny", "1.2.3", "VALUE = 42\n")
    return folder


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("envs") / "cache"


@pytest.fixture
def built_cache(shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The module's one environment cache, crtiny built in it by the first test that asks (a
    build, a venv and pip, took 10-15 s per test on 2 busy cores; what these tests prove is about
    a built environment, not its building, which `cache`'s tests and tests/sandbox cover). Each
    test gets it as this user's own 0755 folder again, whatever modes the test before gave it."""
    monkeypatch.setenv(packages.CACHE_VARIABLE, str(shared_cache))
    if shared_cache.exists():
        os.chown(shared_cache, os.geteuid(), os.getegid())
        shared_cache.chmod(0o755)
    return shared_cache


def fingerprint(folder: Path) -> str:
    """Every entry under `folder`: its path, type, mode, size, mtime and content."""
    digest = hashlib.sha256()
    for base, dirs, files in sorted(os.walk(folder)):
        for name in sorted(dirs + files):
            path = Path(base, name)
            st = path.lstat()
            digest.update(f"{path.relative_to(folder)} {st.st_mode} {st.st_size} {st.st_mtime_ns}\n".encode())
            if path.is_file() and not path.is_symlink():
                digest.update(path.read_bytes())
    return digest.hexdigest()


ATTEMPTS = {
    "write through a directory fd": (
        'exec 3<"$SITE"; echo "import os" > /proc/self/fd/3/evil.pth; echo x > /proc/$$/fd/3/crtiny/__init__.py'
    ),
    "rename the site folder and its parents": (
        'mv "$SITE" /tmp/moved; mv "$SITE/crtiny" /tmp/moved; mv /opt/coderoom/venv /tmp/venv; mv /opt/coderoom /tmp/cr'
    ),
    "plant bytecode": (
        'mkdir -p "$SITE/crtiny/__pycache__" ; cp "$(ls "$SITE"/crtiny/__pycache__/*.pyc | head -1)" /tmp/x.pyc; '
        'printf x >> "$SITE"/crtiny/__pycache__/$(ls "$SITE"/crtiny/__pycache__ | head -1)'
    ),
    "change modes, times and metadata": (
        'chmod 777 "$SITE/crtiny"; touch -d 2000-01-01 "$SITE/crtiny/__init__.py"; '
        'echo "Version: 9" >> "$SITE"/crtiny-1.2.3.dist-info/METADATA; ln -s /workspace "$SITE/link"'
    ),
    "mount over it or make a writable namespace": (
        'unshare -Urm sh -c "mount -t tmpfs x \\"$SITE\\""; mount -o remount,rw "$SITE"; '
        'python3 -c "import os; os.unshare(os.CLONE_NEWUSER)"'
    ),
}


async def test_the_sandbox_cannot_change_its_package_environment_by_any_path(built_cache: Path, wheels: Path) -> None:
    """P1: each attempt fails, the module still imports with its value, and the built folder on
    the host is unchanged, byte for byte and in its modes and times."""
    require_backend("local")
    from coderoom.sandboxes.registry import get_backend

    spec = SandboxSpec(backend="local", environment={"packages": ["crtiny"], "find_links": [str(wheels)]})
    built = packages.ensure(spec.environment)
    assert built is not None
    before = fingerprint(built.folder)
    sandbox = await get_backend("local").start(spec)
    try:
        site = (await sandbox.exec(["python3", "-c", "import crtiny, os; print(os.path.dirname(crtiny.__path__[0]))"]))
        env = {"SITE": site.stdout.decode().strip()}
        assert env["SITE"].startswith("/opt/coderoom/venv/"), site
        results = {what: await sandbox.exec(["sh", "-c", command], env=env) for what, command in ATTEMPTS.items()}
        after = await sandbox.exec(["python3", "-c", "import crtiny; print(crtiny.VALUE)"])
    finally:
        await sandbox.close()
    assert after.stdout == b"42\n", after
    assert fingerprint(built.folder) == before, {k: r.stderr[-300:] for k, r in results.items()}
    assert packages.load(built.folder) is not None


@pytest.mark.parametrize(
    "requirement",
    ["crtiny-1.2.3-py3-none-any.whl", "helper.zip", "helper.tar.gz", "Helper.TGZ", "helper.zip[extra]", "x.tar.bz2"],
)
def test_a_requirement_that_pip_reads_as_a_file_is_refused(requirement: str) -> None:
    """P2: pip takes a requirement ending in an archive suffix for a file relative to its working
    directory (the user's, or a folder a sandbox's workspace was copied back to), so the "a name,
    no paths" rule must refuse it."""
    with pytest.raises(ValueError, match="not a plain pip requirement"):
        requirements.normalize([requirement])


def test_a_wheel_in_the_working_folder_is_never_installed_by_its_file_name(
    tmp_path: Path, cache: Path, wheels: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P2, end to end: before the fix this built an environment from the file in the working
    folder (a wheel: its code runs only in the sandbox; an sdist's setup.py would run on the host)."""
    planted = make_wheel(tmp_path / "cwd", "crplant", "6.6.6", "VALUE = 'planted'\n")
    monkeypatch.chdir(planted.parent)
    with pytest.raises(ValueError, match="not a plain pip requirement"):
        EnvironmentSpec(packages=[planted.name], find_links=[str(wheels)])
    assert not cache.exists() or not any(cache.iterdir())


@pytest.mark.parametrize("key", ["index_url", "find_links"])
def test_an_index_url_with_credentials_is_refused_rather_than_recorded(tmp_path: Path, key: str) -> None:
    """P3: the job goes into run_start.job as it is (and a Docker build's PIP_OPTIONS argument into
    the image's history), so a token in the URL would be written down; pip reads PIP_INDEX_URL
    (hashed into the environment's key, never stored), ~/.netrc or a keyring instead. The error
    names the key without echoing the token."""
    from coderoom.errors import UsageError
    from coderoom.jobs import load_job

    url = "https://alice:CANARY-token-5e1f@pypi.example.invalid/simple"
    value = f'"{url}"' if key == "index_url" else f'["{url}"]'
    (tmp_path / "coderoom.toml").write_text(
        f'prompt = "p"\n[sandbox]\nbackend = "local"\n[sandbox.environment]\npackages = ["crtiny"]\n{key} = {value}\n'
    )
    with pytest.raises(UsageError, match=f"sandbox.environment.{key}.*credentials") as raised:
        load_job(tmp_path)
    assert "CANARY" not in str(raised.value)


def test_an_index_url_without_credentials_is_kept() -> None:
    spec = EnvironmentSpec(packages=["crtiny"], index_url="https://pypi.example.invalid/simple",
                           find_links=["https://wheels.example.invalid/"])  # fmt: skip
    assert (spec.index_url, spec.find_links) == ("https://pypi.example.invalid/simple", ["https://wheels.example.invalid/"])


@pytest.mark.parametrize("how", ["writable by others", "owned by another user"])
def test_a_cache_that_another_user_can_write_is_refused(built_cache: Path, wheels: Path, how: str) -> None:
    """P4: a planted KEY folder (the key is computable from the declaration and the runtime) in a
    cache another user can write, say CODEROOM_ENV_CACHE=/tmp/envs made by them first, would be
    bound into every sandbox that declares those packages."""
    from coderoom.errors import EnvironmentBuildError

    spec = EnvironmentSpec(packages=["crtiny"], find_links=[str(wheels)])
    built = packages.ensure(spec)
    assert built is not None
    if how == "writable by others":
        built_cache.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give the folder away")
        os.chown(built_cache, 65534, 65534)
    with pytest.raises(EnvironmentBuildError, match="owned by another user or writable by others"):
        packages.ensure(spec)
    built_cache.chmod(0o755)
    os.chown(built_cache, os.geteuid(), os.getegid())
    assert packages.ensure(spec) == built


def test_a_cache_writable_by_the_users_own_group_is_kept(built_cache: Path, wheels: Path) -> None:
    """A umask of 002 (a user private group) makes the cache group-writable by that group only."""
    spec = EnvironmentSpec(packages=["crtiny"], find_links=[str(wheels)])
    built = packages.ensure(spec)
    os.chown(built_cache, os.geteuid(), os.getegid())
    built_cache.chmod(0o775)
    assert packages.ensure(spec) == built


SMUGGLED = [
    "--index-url=https://evil.invalid/simple", "-r/etc/passwd", "-c constraints.txt", "-e .", "crtiny --pre",
    "crtiny @ https://evil.invalid/x.whl", "crtiny@file:///tmp/x", "crtiny; python_version>'3'", "./crtiny",
    "../wheels/crtiny", "/tmp/crtiny", "${HOME}", "$HOME", "crtiny==1.0 --hash=sha256:00", "https://evil.invalid/x",
    "crtiny==1.0\n--extra-index-url=https://evil.invalid", "crtiny\x00", "~/.ssh",
]


@pytest.mark.parametrize("spec", SMUGGLED)
def test_a_spec_string_carries_no_pip_option_url_path_marker_or_variable(spec: str) -> None:
    """P5: what a package string may hold (held)."""
    with pytest.raises(ValueError, match="not a plain pip requirement"):
        requirements.normalize([spec])


def test_a_requirements_file_line_that_is_an_option_is_refused(tmp_path: Path) -> None:
    listed = tmp_path / "requirements.txt"
    listed.write_text("crtiny\n-r other.txt\n")
    with pytest.raises(ValueError, match=":2: .* not a plain pip requirement"):
        requirements.read_file(listed)


def test_a_wheel_whose_files_climb_out_of_the_environment_is_not_installed(tmp_path: Path, cache: Path) -> None:
    """P7: a wheel in the find-links folder naming `../../../../CANARY` among its files: pip
    refuses it, so nothing is written outside the build folder and no environment is made."""
    import zipfile

    from coderoom.errors import EnvironmentBuildError

    folder = tmp_path / "wheels"
    wheel = make_wheel(folder, "crclimb", "1.0", "VALUE = 1\n")
    canary = tmp_path / f"CANARY-{os.getpid()}"
    depth = "../" * 12
    with zipfile.ZipFile(wheel, "a") as archive:
        archive.writestr(f"{depth}{str(canary).lstrip('/')}", b"planted")
    with pytest.raises(EnvironmentBuildError):
        packages.ensure(EnvironmentSpec(packages=["crclimb"], find_links=[str(folder)]))
    assert not canary.exists()
    assert [p.name for p in cache.iterdir() if not p.name.endswith((".lock", ".failed.log"))] == []
