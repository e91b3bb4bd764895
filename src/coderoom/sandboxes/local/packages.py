"""Declared package environments (`[sandbox.environment]`, `--package`): built on the host, once
per content, and bound read-only into the local sandbox. Wheels only (`ONLY_WHEELS`): an sdist
would run its setup.py on the host, so a package without a wheel is refused (exit 2, named).

The environment is a venv made from the runtime's base interpreter that sees the runtime's
packages (the host venv's site-packages through a `.pth`, the base's through
include-system-site-packages) while pip installs into it. pip, not uv: pip counts a package that
the runtime already has as installed and adds only what is missing, so numpy, pandas and the
rest stay the runtime's; uv looks at the target environment's own site-packages only
(astral-sh/uv#4466, #7358) and would install a second numpy beside the first, and offline it
would fail for want of a wheel of it. A package the runtime has in a version the declaration
refuses is installed into the environment and wins: pip never removes the runtime's copy (it is
outside the environment).

Cache: `cache_root()/KEY`, KEY the sha256 of the declaration (sorted requirements, index,
find-links, the files in a local find-links folder, pip's PIP_* variables) and of the runtime (Python version,
base, site folders and its installed distributions). A build holds `KEY.lock` (flock), so
concurrent builds of one KEY build once; it runs in `.build-KEY-*` and is renamed to `KEY` when
complete, so a failed or killed build leaves no environment, only its log (`KEY.failed.log`,
named in the error). A cache folder another user owns or may write is refused (`_owned`): the
key is computable, so a planted complete-looking KEY folder would be used. In the sandbox, the environment's site-packages is the sandbox venv's own,
read-only (`bwrap.Runtime.binds`); the record (`environment.json`) and the log stay outside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO
from dataclasses import dataclass
from pathlib import Path

from ...errors import EnvironmentBuildError
from ..limits import shown_size
from ..requirements import project_name
from ..spec import EnvironmentSpec
from . import bwrap

FORMAT = 2  # of the environment's layout and record (2: wheels only): a new one gives new keys
CACHE_VARIABLE = "CODEROOM_ENV_CACHE"
RECORD_FILE = "environment.json"
LOG_FILE = "build.log"
VENV_DIR = "venv"
_BUILD_PTH = "_coderoom_build.pth"  # the host runtime's folders, for pip; removed after the build
_RUNTIME_PTH = "_coderoom_runtime.pth"  # the same folders as the sandbox mounts them
ONLY_WHEELS = "--only-binary=:all:"  # pip option: wheels only, for every package and dependency
NO_SDISTS = (
    "source distributions are not built on this host (their setup.py would run here, outside any "
    "sandbox): give a wheel of it in find_links or the index, or use --sandbox docker, which builds in a container"
)
_MAX_LISTED = 10_000  # files of a local find-links folder that go into the key
_MISSING = re.compile(
    r"(?:No matching distribution found for|Could not find a version that satisfies the requirement)\s+(\S+)"
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuiltEnvironment:
    """A complete environment in the cache: its key, folder and what pip installed into it."""

    key: str
    folder: Path
    installed: tuple[tuple[str, str], ...]  # (name, version), sorted: the environment's own, not the runtime's

    @property
    def site(self) -> Path:
        return self.folder / VENV_DIR / bwrap.runtime().site_rel

    def lock(self, declared: list[str]) -> dict[str, object]:
        """What the run record keeps: the declaration and the exact versions it resolved to."""
        return {
            "key": self.key,
            "declared": declared,
            "installed": [{"name": name, "version": version} for name, version in self.installed],
        }


def cache_root() -> Path:
    """$CODEROOM_ENV_CACHE, else $XDG_CACHE_HOME/coderoom/envs, else ~/.cache/coderoom/envs."""
    given = os.environ.get(CACHE_VARIABLE)
    if given:
        return Path(given).expanduser().absolute()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "coderoom" / "envs"


def environment_key(env: EnvironmentSpec) -> str:
    """The content address of `env` over this runtime (see the module docstring)."""
    rt = bwrap.runtime()
    content = {
        "format": FORMAT,
        "packages": env.packages,
        "index_url": env.index_url,
        "find_links": [[link, _listing(link)] for link in env.find_links],
        "python": [sys.version, sys.implementation.cache_tag, os.uname().machine],
        "runtime": [str(rt.base), rt.interpreter, [[str(s), r] for s, r in rt.venv_sites], rt.system_site_packages],
        "runtime_dists": _runtime_distributions(),
        # pip's own configuration from the environment (an index, a wheel folder): hashed, never stored
        "pip_environment": sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_")),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=1)
def _runtime_distributions() -> tuple[str, ...]:
    """The runtime's installed distributions (read once: about 0.2 s here, and the runtime
    cannot change while this process runs, as `bwrap.runtime`)."""
    return tuple(sorted(
        f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions() if dist.metadata["Name"]
    ))  # fmt: skip


def _listing(link: str) -> list[list[object]]:
    """A local find-links folder's files (name, size): a new or rebuilt wheel gives a new key."""
    if "://" in link:
        return []
    try:
        entries = sorted(os.scandir(link), key=lambda e: e.name)[:_MAX_LISTED]
        return [[e.name, e.stat().st_size] for e in entries if e.is_file()]
    except OSError:
        return []


def ensure(env: EnvironmentSpec, progress: Progress | None = None) -> BuiltEnvironment | None:
    """The built environment for `env` (None when it declares no package): from the cache, else
    built now, once however many processes ask at the same time. EnvironmentBuildError (exit 2)
    names the package that failed and the log."""
    if not env.packages:
        return None
    key = environment_key(env)
    root = cache_root()
    found = load(root / key) if _owned(root) else None
    if found is not None:
        return found
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentBuildError(f"cannot make the package environment cache {root}: {exc.strerror}") from None
    _check_private(root)
    with _locked(root / f"{key}.lock"):
        found = load(root / key)  # another process built it while this one waited
        if found is not None:
            return found
        if progress is not None:
            progress(f"building a package environment for {', '.join(env.packages)} (once; cached in {root / key})")
        return _build(env, key, root)


def _owned(root: Path) -> bool:
    """`root` is ours alone: owned by this user and writable by no one else. Anyone who could
    write there could plant a complete-looking KEY folder (the key is computable), and every
    sandbox that declares those packages would import what they put in it."""
    try:
        st = os.stat(root)
    except OSError:
        return False
    others = st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != os.getegid())  # a umask of 002 is ours
    return st.st_uid == os.geteuid() and not others


def _check_private(root: Path) -> None:
    if not _owned(root):
        raise EnvironmentBuildError(
            f"the package environment cache {root} is owned by another user or writable by others; "
            f"use a folder of your own ({CACHE_VARIABLE})"
        )


def load(folder: Path) -> BuiltEnvironment | None:
    """The environment in `folder` if it is a complete one (its record is written last)."""
    try:
        record = json.loads((folder / RECORD_FILE).read_text(encoding="utf-8"))
        installed = tuple((str(name), str(version)) for name, version in record["installed"])
        if record["format"] != FORMAT:
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return BuiltEnvironment(folder.name, folder, installed)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(env: EnvironmentSpec, key: str, root: Path) -> BuiltEnvironment:
    for stale in [*root.glob(f".build-{key}-*"), root / key]:  # a killed build's, or an incomplete one
        shutil.rmtree(stale, ignore_errors=True)  # (no record: see `load`); we hold the lock now
    failed_log = root / f"{key}.failed.log"
    try:
        work = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=root))
    except OSError as exc:
        raise EnvironmentBuildError(f"cannot build the package environment in {root}: {exc}") from None
    log_path = work / LOG_FILE
    try:
        with open(log_path, "wb") as log:
            installed = _install(env, work / VENV_DIR, log)
        (work / RECORD_FILE).write_text(json.dumps({
            "format": FORMAT, "declared": env.packages, "index_url": env.index_url, "find_links": env.find_links,
            "installed": [list(item) for item in installed], "built_at": time.time(), "python": sys.version,
        }, indent=1))  # fmt: skip
        os.chmod(work, 0o755)
        os.rename(work, root / key)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            shutil.move(str(log_path), failed_log)
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(exc, EnvironmentBuildError):
            raise EnvironmentBuildError(f"{exc.message} (pip's output: {failed_log})") from None
        if isinstance(exc, OSError):  # a full disk, a cache folder we may not write
            raise EnvironmentBuildError(f"cannot build the package environment in {root}: {exc}") from None
        raise
    with contextlib.suppress(OSError):
        failed_log.unlink()
    return BuiltEnvironment(key, root / key, installed)


def _install(env: EnvironmentSpec, venv: Path, log: BinaryIO) -> tuple[tuple[str, str], ...]:
    """Make the venv, install `env` into it with pip, check its size; what it installed."""
    rt = bwrap.runtime()
    deadline = time.monotonic() + env.build_timeout
    make = [str(rt.base / rt.interpreter), "-m", "venv", "--without-pip"]
    if not rt.venv_sites or rt.system_site_packages:
        make.append("--system-site-packages")
    _run([*make, str(venv)], env, deadline, log, "making the environment's venv")
    site = venv / rt.site_rel
    platlib = sysconfig.get_path("platlib", "venv", vars={"base": str(venv), "platbase": str(venv)})
    if not site.is_dir() or Path(platlib) != site:
        raise EnvironmentBuildError(f"this Python's venv layout is not supported for package environments ({platlib})")
    (site / _BUILD_PTH).write_text("".join(f"import site; site.addsitedir({str(s)!r})\n" for s, _ in rt.venv_sites))
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
    pip += ["--no-input", "--disable-pip-version-check", "--no-warn-script-location", "--progress-bar", "off"]
    pip.append("--no-compile")  # compiled below with the sandbox's paths, not the build folder's
    pip.append(ONLY_WHEELS)  # building an sdist runs its setup.py here, on the host (security.md P13)
    if env.index_url:
        pip += ["--index-url", env.index_url]
    elif env.find_links:
        pip.append("--no-index")  # a declared wheel folder and no index: offline, from the folder only
    for link in env.find_links:
        pip += ["--find-links", link]
    code = _run([*pip, *env.packages], env, deadline, log, "pip", check=False)
    if code != 0:
        raise EnvironmentBuildError(f"cannot build the package environment: {_failed_package(env, Path(log.name))}")
    (site / _BUILD_PTH).unlink()
    # bytecode now, as the sandbox cannot write it (read-only), naming the files where it sees them
    compile_all = [str(rt.base / rt.interpreter), "-m", "compileall", "-q", "-j", "0"]
    _run([*compile_all, "-d", f"{bwrap.VENV_MOUNT}/{rt.site_rel}", str(site)], env, deadline, log, "compiling bytecode")
    (site / _RUNTIME_PTH).write_text("".join(f"import site; site.addsitedir({s!r})\n" for s in rt.layered_sites()))
    size = _size(venv)
    if size > env.max_size:
        raise EnvironmentBuildError(
            f"the package environment for {', '.join(env.packages)} is {shown_size(size)}, over the "
            f"[sandbox.environment] max_size of {shown_size(env.max_size)}; raise max_size or declare fewer packages"
        )
    return tuple(sorted(
        (project_name(dist.metadata["Name"]), dist.version)
        for dist in importlib.metadata.distributions(path=[str(site)]) if dist.metadata["Name"]
    ))  # fmt: skip


def _run(argv: list[str], env: EnvironmentSpec, deadline: float, log: BinaryIO, what: str, *, check: bool = True) -> int:
    """Run `argv` with its output in the log, in a process group killed at the build deadline."""
    environ = {**os.environ, "PIP_NO_INPUT": "1", "PYTHONNOUSERSITE": "1"}
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                               env=environ, start_new_session=True)  # fmt: skip
    try:
        code = process.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise EnvironmentBuildError(
            f"building the package environment for {', '.join(env.packages)} ran past the "
            f"[sandbox.environment] build_timeout of {env.build_timeout:g} s ({what}); raise build_timeout"
        ) from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    if check and code != 0:
        raise EnvironmentBuildError(f"cannot build the package environment: {what} exited with status {code}")
    return code


def _failed_package(env: EnvironmentSpec, log_path: Path) -> str:
    """Which declared package pip could not install, as pip's output says (else all of them)."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(max(0, log_path.stat().st_size - 256 * 1024))
            text = handle.read().decode(errors="replace")
    except OSError:
        text = ""
    match = _MISSING.search(text)
    if match:
        return f"pip found no wheel of {match.group(1)!r} that it could install ({NO_SDISTS})"
    return f"pip could not install {', '.join(repr(p) for p in env.packages)}"


def _size(folder: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total
