"""What a docker sandbox is, as the Docker Engine API takes it: the create request of a hardened
container (`create_request`) and the command requests to its init.py and their replies
(`command_request`, `command_result`).

One place for each rule, and no `docker` package: the full path (`container`, through docker-py's
`create_container_from_config`) and the CLI's fast path (`plain`, over the engine's socket)
post the very same request, so no hardening flag can be on one and missing from the other.
The container is non-root with a read-only root, tmpfs /tmp and workspace (sizes from Limits),
no capabilities, no-new-privileges, Docker's default seccomp profile plus coderoom's (init.py
stacks it), `network none` (or, with network = true, a network of the session's own: `network`),
memory/CPU/pids/rlimits from Limits, no host environment, no logging of command output, labels
for `coderoom sandbox prune`, and removed by the daemon once PID 1 ends (with its owner, or at the
end of a bound run's recovery window: `bindings`).
"""

from __future__ import annotations

import base64
import functools
import marshal
import os
import time
from collections.abc import Mapping, Sequence
from importlib.machinery import SourceFileLoader
from importlib.util import MAGIC_NUMBER
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING, Any

from ...errors import SandboxFailed
from ..base import EXIT_TIMEOUT
from ..core import CommandResult
from ..limits import CPU_KILL_GRACE_S, Limits
from ..seccomp import arch_named, build_filter
from ..stops import named_stop, stop_note
from .labels import CONTACT_WITHIN_S, CREATED_LABEL, LABEL, SESSION_LABEL, owner_labels
from .network import IPV6_OFF, network_name

if TYPE_CHECKING:
    import uuid

SANDBOX_UID = 1000
WORKSPACE = "/workspace"
INIT_PATH = Path(__file__).with_name("inside") / "init.py"
INIT_SOURCE = INIT_PATH.read_text()
INIT_NAME = "coderoom-init"  # its code's file name in the sandbox (no host path)
INIT_ENV = "CODEROOM_INIT"  # init.py's source, popped by INIT_BOOTSTRAP (also rescue.py's exec)
INIT_CODE_ENV = "CODEROOM_INIT_CODE"  # the same compiled (`code_value`), popped by INIT_BOOTSTRAP
# init.py's source was compiled in every container, a quarter of PID 1's CPU before its first
# reply: the code compiled on the host goes along, marshalled, and runs instead when the image's
# Python has the host's bytecode magic number; any other Python (or none given) compiles the source.
MAX_ARG_STRLEN = 32 * 4096  # Linux's bound on one argument or environment string, NUL included
INIT_BOOTSTRAP = (
    f"import os\nc = os.environ.pop({INIT_CODE_ENV!r}, '')\n"
    "try:\n import binascii, marshal, _frozen_importlib_external as f\n m, _, c = c.partition(':')\n"
    " c = marshal.loads(binascii.a2b_base64(c)) if m == f.MAGIC_NUMBER.hex() else None\n"
    "except Exception:\n c = None\n"
    f"s = os.environ.pop({INIT_ENV!r})\nexec(c or compile(s, {INIT_NAME!r}, 'exec'))"
)
SECCOMP_ENV = "CODEROOM_SECCOMP"  # init.py's SECCOMP_ENV
FORWARDER_ENV = "CODEROOM_FORWARDER"  # init.py's FORWARDER_ENV: the egress forwarder's source
NO_HOME = "/nonexistent"
_NOFILE = 1024
REPLY_SLACK_S = 15.0  # how long past a command's own deadline we wait before blaming the channel
# The image's python3 by absolute path, never looked up in PATH: a manifest environment may set
# PATH for every process of the container (PID 1 and the helpers too), and Docker looked the
# entrypoint up in it (a PATH without python3 made create fail with APIError 400). /bin/sh
# starts it from the first of PYTHON_DIRS that has one (where Python images put it: Docker's
# default PATH, then conda's); `exec` leaves python3 as the process, with its arguments.
PYTHON_DIRS = ("/usr/local/bin", "/usr/bin", "/bin", "/opt/conda/bin")
_FIND_PYTHON = (
    f'for d in {" ".join(PYTHON_DIRS)}; do if [ -x "$d/python3" ]; then exec "$d/python3" "$@"; fi; done; '
    f'echo "coderoom: the image has no python3 in {" ".join(PYTHON_DIRS)}" >&2; exit 127'
)
PYTHON = ("/bin/sh", "-c", _FIND_PYTHON, "python3")  # + python3's own arguments
# (source, target) of the one bind mount, when the network is off: Docker would otherwise write
# the host's resolvers into /etc/resolv.conf (catalogue NET-03); resume recognises it by this
RESOLV_CONF_BIND = ("/dev/null", "/etc/resolv.conf")


def seccomp_for(machine: str) -> bytes:
    """seccomp.py's program for the engine's CPU, as its /version names it (DOCKER_HOST may be
    another machine)."""
    arch = arch_named(machine)
    if arch is None:
        raise SandboxFailed(f"no seccomp syscall table for the Docker engine's CPU ({machine!r})")
    return build_filter(arch)


def code_value(code: CodeType) -> str:
    """INIT_CODE_ENV's value for `code`: this Python's bytecode magic number, then the marshalled
    code (what INIT_BOOTSTRAP runs when the image's Python has the same magic)."""
    return f"{MAGIC_NUMBER.hex()}:{base64.b64encode(marshal.dumps(code)).decode()}"


@functools.cache
def init_code() -> str:
    """init.py's code for INIT_CODE_ENV, from Python's own bytecode cache of the file (compiled
    and cached when it is missing or stale), every code object renamed INIT_NAME."""

    def renamed(code: CodeType) -> CodeType:
        consts = tuple(renamed(c) if isinstance(c, CodeType) else c for c in code.co_consts)
        return code.replace(co_filename=INIT_NAME, co_consts=consts)

    code = SourceFileLoader("coderoom_init", str(INIT_PATH)).get_code("coderoom_init")
    value = code_value(renamed(code or compile(INIT_SOURCE, INIT_NAME, "exec")))
    # a longer environment string would make PID 1's execve fail (E2BIG): then the source alone
    return value if len(f"{INIT_CODE_ENV}={value}") < MAX_ARG_STRLEN else ""


def new_session_hex() -> str:
    """A new sandbox's id, 128 random bits in hex like `uuid.uuid4().hex`: the uuid module loads
    platform, a few ms of the CLI's fast path (`plain`)."""
    return os.urandom(16).hex()


def workspace_tmpfs_size(limits: Limits) -> int:
    """The workspace tmpfs: at most workspace_size, and small enough to leave the container's
    processes room in its memory limit. tmpfs pages count against memory but belong to no
    process, so a workspace filled past memory would make the kernel OOM-kill PID 1 (init.py)
    and lose the run; capped, filling it fails with ENOSPC instead (attack B08)."""
    headroom = max(64 * 1024**2, limits.memory // 4)
    return min(limits.workspace_size, max(16 * 1024**2, limits.memory - headroom))


def create_request(
    limits: Limits,
    *,
    image: str,
    program: bytes,
    root: str = WORKSPACE,
    session_id: uuid.UUID | None = None,
    labels: Mapping[str, str] | None = None,
    environment: Mapping[str, str] | None = None,
    egress_dir: Path | None = None,
) -> tuple[str, dict[str, Any]]:
    """The container's name and the body of `POST /containers/create` for a hardened sandbox.
    With an allowlist (`limits.egress`), `egress_dir` is the host folder of the session's proxy
    socket (`egress`): bound read-only at INSIDE_DIR, init.py starts the forwarder to it and
    every process gets the proxy's environment (`egress.session.sandbox_env`)."""
    if (limits.egress is None) != (egress_dir is None):
        raise ValueError("an allowlisted sandbox needs the folder of its proxy's socket, and only it")
    session_hex = session_id.hex if session_id is not None else new_session_hex()
    mount_opts = "rw,exec,nosuid,nodev"
    env = {
        **(environment or {}),
        "PYTHONNOUSERSITE": "1",
        "HOME": NO_HOME,  # init.py gives each command its own
        # The source travels in the environment so `ps` in the sandbox shows a short PID 1;
        # init.py drops the variable before it starts any command.
        INIT_ENV: INIT_SOURCE,
        INIT_CODE_ENV: init_code(),
        SECCOMP_ENV: base64.b64encode(program).decode(),
    }
    cmd = ["--exit-on-eof", "--seccomp", f"--contact-within={CONTACT_WITHIN_S:g}"]
    if egress_dir is not None:
        from ...egress.session import FORWARDER_PORT, bundle_path, forwarder_source, sandbox_env  # not on the fast path
        from .egress import INSIDE_DIR, INSIDE_SOCKET

        assert limits.egress is not None
        env.update(sandbox_env(bundle=bundle_path(limits.egress, INSIDE_DIR)))
        env[FORWARDER_ENV] = forwarder_source()
        cmd.append(f"--egress={INSIDE_SOCKET}:{FORWARDER_PORT}")
    host: dict[str, Any] = {
        "Memory": limits.memory,
        "MemorySwap": limits.memory,
        "ShmSize": limits.tmp_size,
        "IpcMode": "private",
        "ReadonlyRootfs": True,
        "NetworkMode": network_name(session_hex) if limits.network else "none",
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges"],  # and Docker's default seccomp profile
        "Ulimits": [
            {"Name": "fsize", "Soft": limits.file_size, "Hard": limits.file_size},
            {"Name": "cpu", "Soft": limits.cpu_time, "Hard": limits.cpu_time + CPU_KILL_GRACE_S},
            {"Name": "core", "Soft": 0, "Hard": 0},
            {"Name": "nofile", "Soft": _NOFILE, "Hard": _NOFILE},
        ],
        "LogConfig": {"Type": "none", "Config": {}},
        "Tmpfs": {
            "/tmp": f"{mount_opts},size={limits.tmp_size},mode=1777",
            root: f"{mount_opts},size={workspace_tmpfs_size(limits)},uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0755",
        },
        "PidsLimit": limits.pids,
        # stdin closes when the host's attach connection drops, init.py then exits (after the
        # recovery window of a bound run, `bindings`) and the daemon removes the container: a
        # killed host leaves nothing behind past that bound (SES-04)
        "AutoRemove": True,
        "Init": False,
        "NanoCpus": int(limits.cpus * 1e9),
    }
    if limits.network:
        host["Sysctls"] = dict(IPV6_OFF)
    else:
        # Docker writes the host's resolvers into /etc/resolv.conf even with `network none`
        # (host layout disclosure, catalogue NET-03); a mount there makes it skip that.
        source, target = RESOLV_CONF_BIND
        host["Mounts"] = [{"Target": target, "Source": source, "Type": "bind", "ReadOnly": True}]
        if egress_dir is not None:  # a socket in a read-only bind can still be connected to
            host["Mounts"].append({"Target": INSIDE_DIR, "Source": str(egress_dir), "Type": "bind", "ReadOnly": True})
    body = {
        "Hostname": "sandbox",
        "User": f"{SANDBOX_UID}:{SANDBOX_UID}",
        "Tty": False,
        "OpenStdin": True,
        "StdinOnce": True,
        "AttachStdin": True,
        "AttachStdout": True,
        "AttachStderr": True,
        "Env": [f"{key}={value}" for key, value in env.items()],
        "Cmd": cmd,
        "Image": image,
        "Entrypoint": [*PYTHON, "-I", "-S", "-c", INIT_BOOTSTRAP],
        "HostConfig": host,
        "Labels": {
            **(labels or {}),
            LABEL: "1",
            SESSION_LABEL: session_hex,
            CREATED_LABEL: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),  # datetime's isoformat, unloaded
            **owner_labels(),
        },
    }
    return f"coderoom-{session_hex[:12]}", body


def command_request(
    argv: Sequence[str],
    *,
    cwd: str,
    timeout: float,
    cap: int,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """init.py's request to run `argv` (no shell) within `timeout` s, each output capped at `cap`."""
    return {
        "argv": [str(a) for a in argv],
        "cwd": cwd,
        "env": dict(env or {}),
        "timeout": timeout,
        "limit": cap,
        "stdin": base64.b64encode(stdin).decode() if stdin is not None else None,
    }


def command_result(reply: Mapping[str, Any], *, timeout: float, limits: Limits) -> CommandResult:
    """The result of a command from init.py's reply (parsed within its line bound), with what
    stopped it named as on the local backend; SandboxFailed for a reply that is not one (PID 1
    shares the sandbox's uid: what it writes is hostile)."""
    if "error" in reply:  # could not start: bad argv, the pids limit, an archive under way
        message = f"coderoom: could not start the command: {str(reply['error'])[:1000]}\n"
        return CommandResult(126, b"", message.encode())
    timed_out = bool(reply.get("timed_out"))
    try:
        result = CommandResult(
            exit_code=EXIT_TIMEOUT if timed_out else int(reply["code"]),
            stdout=base64.b64decode(reply["out"]),
            stderr=base64.b64decode(reply["err"]),
            timed_out=timed_out,
            stopped_by=f"the {timeout:g} s wall-clock limit" if timed_out else None,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SandboxFailed(f"the sandbox's init sent a malformed reply ({type(e).__name__})") from None
    if not timed_out:
        oom = reply.get("oom_killed") is True
        result.stopped_by = named_stop(result.exit_code, result.stderr, limits, oom_killed=oom)
        if result.stopped_by:
            result.stderr += stop_note(result.stopped_by)
    return result
