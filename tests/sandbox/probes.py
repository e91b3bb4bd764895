"""The attack catalogue (../shared/security/attack-catalogue.md) as data: one probe per case.

A probe is code run inside a sandbox and the SAFE outcome the catalogue names, as a regex its
stripped stdout must fully match (errno names exactly where the catalogue gives one). Probes
use the try-syscall pattern: invalid pointers, so "reachable" shows as EFAULT/EBADF and
"filtered" as EPERM/ENOSYS, without side effects. Syscall numbers are x86_64.

`baseline=True` marks probes that are harmless on an unconfined host and that the SDK's
`unix_local` is expected to FAIL (it proves the probe can see the leak). Tokens like @HOME@ are
filled from the canaries the harness plants on the host (see `Canaries`).

Used by tests/sandbox/test_attack_catalogue.py and benchmarks/security_matrix.py.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import sys
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PRELUDE = """\
import ctypes, errno, os, signal, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
def sc(*a):
    r = libc.syscall(*a)
    return "OK" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
def tr(f):
    try:
        f()
        return "OK"
    except socket.gaierror:
        return "EAI"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
"""

I386_PTRACE = """
import mmap, subprocess
code = "import ctypes, mmap\\nb = mmap.mmap(-1, 4096, prot=7)\\nb.write(bytes(@CODE@))\\n" \\
       "f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(b)))\\nprint(f())"
done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
print(done.returncode, done.stdout.strip())
""".replace("@CODE@", repr([0xB8, 26, 0, 0, 0, 0x31, 0xDB, 0xCD, 0x80, 0xC3]))


@dataclass(frozen=True)
class Probe:
    id: str
    title: str
    code: str
    expect: str  # regex, full match on stripped stdout
    sh: bool = False
    docker_expect: str | None = None  # where the catalogue accepts a different outcome
    limits: dict[str, object] = field(default_factory=dict)
    baseline: bool = False
    timeout: float = 20.0

    def expected(self, backend: str) -> str:
        return self.docker_expect if backend == "docker" and self.docker_expect else self.expect

    def passes(self, backend: str, stdout: str) -> bool:
        return re.fullmatch(self.expected(backend), stdout.strip(), re.DOTALL) is not None


NO = "(ENOENT|EACCES|EROFS|EPERM)"

PROBES: list[Probe] = [
    # ---------------------------------------------------------------- SEC
    Probe("SEC-01", "secret in the sandbox env",
          'print(os.environ.get("OPENAI_API_KEY"), sorted(k for k in os.environ if any('
          's in k for s in ("KEY", "TOKEN", "SECRET", "PASS", "KUBERNETES", "PROXY"))))',
          r"None \[\]", baseline=True),
    Probe("SEC-02", "/proc/self/environ", 'print(b"sk-" in open("/proc/self/environ", "rb").read())',
          "False", baseline=True),
    Probe("SEC-03", "/proc/1 environ and cmdline",
          'try:\n    env = open("/proc/1/environ", "rb").read()\nexcept PermissionError:\n    env = b""\n'
          'cmdline = open("/proc/1/cmdline", "rb").read()\n'
          'host = [b"@HOME@", b"@CWD@", b"@HOST_PREFIX@", b"coderoom-local-"]\n'
          'print(b"sk-" + b"canary" in env, any(path in cmdline for path in host))', "False False"),
    Probe("SEC-04", "environ of host processes",
          'print(tr(lambda: open("/proc/@HOST_PID@/environ", "rb").read()))', "(ENOENT|EACCES)",
          baseline=True),
    Probe("SEC-05", "secrets in host command lines",
          "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
          " | grep -c 'sk-canary-CMD[L]INE'", "0", sh=True, baseline=True),
    Probe("SEC-06", "credential files in HOME",
          'print(*(tr(lambda p=p: open(p).read()) for p in (os.path.expanduser("~/.ssh/id_rsa"),'
          ' "@HOME@/.ssh/id_rsa", "/root/.ssh/id_rsa", "@HOME@/.aws/credentials")))',
          "ENOENT ENOENT (ENOENT|EACCES) ENOENT", baseline=True),
    Probe("SEC-07", "/etc/shadow", 'print(tr(lambda: open("/etc/shadow").read()))', "(ENOENT|EACCES)"),
    Probe("SEC-08", "host cwd and project .env",
          'print(os.getcwd(), tr(lambda: open("/proc/@HOST_PID@/cwd/.env").read()),'
          ' tr(lambda: open("@CWD@/.env").read()))',
          "/workspace (ENOENT|EACCES) ENOENT", baseline=True),
    Probe("SEC-09", "kernel keyring", 'print(sc(250, 10, -4, b"user", b"openai", 0))', "EPERM"),
    Probe("SEC-10", "agent and IPC sockets",
          'print(os.environ.get("SSH_AUTH_SOCK"), os.environ.get("DBUS_SESSION_BUS_ADDRESS"),'
          ' os.path.exists("/run/user"), os.path.exists("/run/dbus/system_bus_socket"))',
          "None None False False"),
    Probe("SEC-11", "inherited file descriptors",
          'fds = [int(f) for f in os.listdir("/proc/self/fd")]\n'
          'print(sorted(f for f in fds if f > 2 and os.path.exists(f"/proc/self/fd/{f}")))', r"\[\]"),
    Probe("SEC-12", "orchestrator secrets",
          'print(os.path.exists("/run/secrets"), os.path.exists("/var/run/secrets/kubernetes.io"))',
          "False False"),
    Probe("SEC-13", "cloud metadata: no route anywhere (proved without sending a packet)",
          'r4 = open("/proc/net/route").read().splitlines()[1:]\n'
          'r6 = [l.split()[-1] for l in open("/proc/net/ipv6_route")]\n'
          'print(len(r4), all(dev == "lo" for dev in r6))', "0 True", baseline=True),
    Probe("SEC-14", "host layout disclosure",
          'print(socket.gethostname(), "root:" not in open("/etc/hostname").read())', "sandbox True"),
    # ---------------------------------------------------------------- FS
    Probe("FS-01", "overwrite a host file",
          'print(tr(lambda: open("@HOME@/victim.txt", "a").write("pwned")))', "(ENOENT|EROFS)",
          baseline=True),
    # the unconfined baseline really writes the .pth: removed at once, so no host Python runs it
    Probe("FS-02", "persistence the host executes",
          'import site\nprint(tr(lambda: os.remove(open(site.getsitepackages()[0] + "/cr-@NONCE@.pth", "w").name)),'
          ' tr(lambda: open("@HOME@/.bashrc", "a")))', "(EROFS|EACCES) ENOENT", baseline=True),
    Probe("FS-03", "/tmp and /dev/shm are private",
          'print(tr(lambda: open("/tmp/cr-@NONCE@", "w").write("x")),'
          ' tr(lambda: open("/dev/shm/cr-@NONCE@", "wb").write(b"x" * 8_000_000)))', "OK OK"),
    Probe("FS-04", "read-only root filesystem",
          'print(*(tr(lambda p=p: open(p + "/x", "w")) for p in ("", "/etc", "/usr", "/bin")))',
          "(EROFS|EACCES) (EROFS|EACCES) (EROFS|EACCES) (EROFS|EACCES)"),
    Probe("FS-08", "hard link to a host file",
          'print(tr(lambda: os.link("@HOME@/.ssh/id_rsa", "k")))', "(ENOENT|EXDEV|EPERM)"),
    # ---------------------------------------------------------------- NET
    Probe("NET-01", "only lo, no route (covers NET-02, NET-04: nothing is sent)",
          'print(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]),'
          ' len(open("/proc/net/route").read().splitlines()) - 1)', r"\['lo'\] 0", baseline=True),
    Probe("NET-03", "DNS: no resolver configured (docker mounts an empty resolv.conf)",
          'conf = open("/etc/resolv.conf").read() if os.path.exists("/etc/resolv.conf") else ""\n'
          'print(any(l.split()[:1] == ["nameserver"] for l in conf.splitlines()),'
          ' tr(lambda: socket.getaddrinfo("sk-canary.example", 80)))', "False EAI"),
    Probe("NET-05", "host loopback service",
          'print(tr(lambda: socket.create_connection(("127.0.0.1", @PORT@), 2).recv(100)))',
          "(ECONNREFUSED|ENETUNREACH)", baseline=True),
    Probe("NET-06", "docker/containerd sockets",
          'print(*(tr(lambda p=p: socket.socket(socket.AF_UNIX).connect(p)) for p in'
          ' ("/var/run/docker.sock", "/run/containerd/containerd.sock", "/run/podman/podman.sock")))',
          "ENOENT ENOENT ENOENT"),
    Probe("NET-07", "abstract unix socket of the host",
          'print(tr(lambda: socket.socket(socket.AF_UNIX).connect("\\0@ABSTRACT@")))', "ECONNREFUSED",
          baseline=True),
    Probe("NET-08", "raw and packet sockets",
          'print(tr(lambda: socket.socket(17, socket.SOCK_RAW, 0)),'
          ' tr(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)))',
          "(EAFNOSUPPORT|EPERM) EPERM"),
    # ---------------------------------------------------------------- PROC
    Probe("PROC-01", "process visibility",
          'print(len([p for p in os.listdir("/proc") if p.isdigit()]) <= 5)', "True", baseline=True),
    Probe("PROC-02", "signal a host process", 'print(tr(lambda: os.kill(@HOST_PID@, 0)))', "ESRCH",
          baseline=True),
    Probe("PROC-03", "kill(-1) reaches only the sandbox",
          'print(tr(lambda: os.kill(-1, signal.SIGCONT)), open("/proc/self/stat").read().split()[2])',
          "(OK|ESRCH) R"),
    Probe("PROC-04", "ptrace and /proc/pid/mem of the host",
          'print(sc(101, 0x4206, @HOST_PID@, 0, 0), tr(lambda: open("/proc/@HOST_PID@/mem", "rb")))',
          "(EPERM|ESRCH) ENOENT"),
    Probe("PROC-08", "TIOCSTI, also with high bits set (CVE-2019-10063)",
          'print(sc(16, 0, 0x5412, b"x"), sc(16, 0, ctypes.c_ulong(0x100005412), b"x"),'
          ' sc(16, 0, 0x541C, b"x"))',
          "EPERM EPERM EPERM"),
    Probe("PROC-09", "privilege escalation inside",
          'nnp = [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")]\n'
          'print(tr(lambda: os.setuid(0)), *nnp)', "(EPERM|EINVAL) 1"),
    Probe("PROC-10", "no control daemon listening inside",
          'print(sum(l.split()[3] == "0A" for f in ("/proc/net/tcp", "/proc/net/tcp6")'
          ' for l in open(f).readlines()[1:]))', "0"),
    # ---------------------------------------------------------------- RES
    Probe("RES-01", "fork bomb stops at the pids limit",
          'import time\nn = 0\ntry:\n    while n < 1000:\n        if os.fork() == 0:\n'
          '            time.sleep(30)\n            os._exit(0)\n        n += 1\n'
          'except BlockingIOError as e:\n    print(errno.errorcode[e.errno], n < 32)',
          "EAGAIN True", limits={"pids": 32}),
    Probe("RES-02", "thread bomb stops at the pids limit",
          'import threading, time\nn = 0\ntry:\n    while n < 1000:\n'
          '        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        n += 1\n'
          'except RuntimeError:\n    print("RuntimeError", n < 32, flush=True)\nos._exit(0)',
          "RuntimeError True", limits={"pids": 32}),
    Probe("RES-03", "memory bomb",
          'try:\n    x = bytearray(512 * 1024**2)\n    print("allocated")\nexcept MemoryError:\n'
          '    print("MemoryError")', "(MemoryError|)",  # refused, or killed by the memory cgroup (137)
          limits={"memory": "256M"}),
    Probe("RES-04", "memory RLIMIT_AS does not see: /dev/shm",
          'print(tr(lambda: open("/dev/shm/f", "wb").write(b"\\1" * 2**25)))', "(ENOSPC|EFBIG)",
          limits={"tmp_size": "16M"}),
    Probe("RES-09", "one huge file, and a sparse 1 TiB truncate (covers ART-05)",
          'open("sparse", "wb").close()\n'
          'print(tr(lambda: open("big", "wb").write(b"\\0" * 2**21)), tr(lambda: os.truncate("sparse", 1 << 40)))',
          "EFBIG EFBIG",
          limits={"file_size": "1M"}),
    Probe("RES-11", "file-descriptor exhaustion",
          'fs = []\ntry:\n    while len(fs) < 10**6:\n        fs.append(open("/dev/null"))\n'
          'except OSError as e:\n    print(errno.errorcode[e.errno], len(fs) < 4096)', "EMFILE True"),
    Probe("RES-13", "pipes held open by grandchildren", "(sleep 1000 &) ; echo started", "started",
          sh=True, timeout=30),
    # ---------------------------------------------------------------- ART / PI / AST (contained)
    Probe("ART-04", "device node in outputs",
          'import stat\nprint(tr(lambda: os.mknod("null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))))',
          "EPERM"),
    Probe("PI-02", "instruction to read host files",
          'print(tr(lambda: open(os.path.expanduser("~/.ssh/id_rsa")).read()),'
          ' tr(lambda: open("../.env").read()))', "ENOENT ENOENT"),
    Probe("AST-01", "class-hierarchy escape, contained",
          '[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == "BuiltinImporter"][0]'
          '.load_module("os").system("cat @HOME@/.ssh/id_rsa 2>/dev/null || echo contained")',
          "contained", baseline=True),
    Probe("AST-03", "ctypes to libc, contained",
          'ctypes.CDLL(None).system(b"cat @HOME@/.ssh/id_rsa 2>/dev/null || echo contained")',
          "contained", baseline=True),
    Probe("AST-04", "allowed libraries doing I/O",
          'import pandas\nprint(tr(lambda: pandas.read_csv("@HOME@/.ssh/id_rsa")))', "ENOENT",
          baseline=True),
    # ---------------------------------------------------------------- KERN
    Probe("KERN-01", "create a user namespace (covers KERN-02)", "print(sc(272, 0x10000000))", "EPERM",
          baseline=True),
    Probe("KERN-03", "mount and the new mount API",
          'print(sc(165, b"none", b"/tmp", b"tmpfs", 0, None), sc(430, b"tmpfs", 0),'
          ' sc(428, -1, None, 0), sc(429, -1, None, -1, None, 0), sc(442, -1, None, 0, None, 0))',
          "EPERM EPERM EPERM EPERM EPERM"),
    Probe("KERN-04", "keyctl / add_key / request_key",
          "print(sc(250, 0, -4, 0), sc(248, None, None, None, 0, 0), sc(249, None, None, None, 0))",
          "EPERM EPERM EPERM"),
    Probe("KERN-05", "bpf", "print(sc(321, 5, None, 0))", "EPERM"),
    Probe("KERN-06", "userfaultfd (user-mode only)", "print(sc(323, 1))", "EPERM", baseline=True),
    Probe("KERN-07", "io_uring", "print(sc(425, 1, None), sc(426, -1, 0, 0, 0, None, 0))",
          "(EPERM|ENOSYS) (EPERM|ENOSYS)", baseline=True),
    Probe("KERN-08", "perf_event_open", "print(sc(298, None, 0, -1, -1, 0))", "EPERM", baseline=True),
    Probe("KERN-09", "clone with namespace flags, clone3",
          "print(sc(56, 0x10000000 | 17, 0, 0, 0, 0), sc(435, None, 88))", "EPERM ENOSYS"),
    Probe("KERN-10", "i386 syscall via int 0x80 (ptrace)", I386_PTRACE, "-31"),
    Probe("KERN-11", "socket families with a bug history",
          'print(*(tr(lambda f=f: socket.socket(f, socket.SOCK_SEQPACKET if f == 38 else'
          ' socket.SOCK_STREAM)) for f in (38, 40, 17)))',
          "(EAFNOSUPPORT|EPERM) (EAFNOSUPPORT|EPERM) (EAFNOSUPPORT|EPERM)"),
    Probe("KERN-12", "open_by_handle_at (Shocker)", "print(sc(304, -1, None, 0), sc(303, -1, None, None, None, 0))",
          "EPERM EPERM", baseline=True),
    Probe("KERN-13", "modules, kexec, raw I/O, personality, syslog, acct, swap, reboot",
          "print(sc(175, None, 0, None), sc(313, -1, None, 0), sc(246, 0, 0, None, 0), sc(172, 3),"
          " sc(173, 0, 1, 1), sc(135, 0x0040000), sc(103, 3, None, 0), sc(163, None),"
          " sc(167, None, 0), sc(169, 0, 0, 0, None))",
          " ".join(["EPERM"] * 10)),
    # opened for writing, never written: if the boundary fails, the host is still untouched
    Probe("KERN-14", "procfs, sysfs and cgroupfs writes",
          'print(tr(lambda: open("/proc/sys/kernel/core_pattern", "r+").close()),'
          ' tr(lambda: open("/proc/sysrq-trigger", "r+").close()), tr(lambda: open("/proc/kcore", "rb").read(1)),'
          ' tr(lambda: os.mkdir("/sys/fs/cgroup/x")))',
          f"{NO} {NO} {NO} {NO}"),
    Probe("KERN-16", "in-sandbox self-check, every thread",
          'import threading\nthreading.Thread(target=lambda: __import__("time").sleep(1), daemon=True).start()\n'
          "ok = True\n"
          'for t in os.listdir("/proc/self/task"):\n'
          '    s = dict(l.split(":", 1) for l in open(f"/proc/self/task/{t}/status"))\n'
          '    ok &= s["NoNewPrivs"].strip() == "1" and s["Seccomp"].strip() == "2"\n'
          '    ok &= all(int(s[k], 16) == 0 for k in ("CapEff", "CapBnd", "CapAmb", "CapPrm"))\n'
          '    ok &= s["Uid"].split()[0] != "0"\n'
          "print(ok)", "True"),
    Probe("KERN-17", "dmesg and kernel pointers",
          'print(sc(103, 3, None, 0), open("/proc/kallsyms").readline().startswith("0000000000000000"))',
          "EPERM True"),
    # ---------------------------------------------------------------- DEV / TIME
    Probe("DEV-01", "/dev inventory",
          'allow = set("core fd full null ptmx pts random shm stderr stdin stdout tty urandom zero mqueue".split())\n'
          'print(sorted(set(os.listdir("/dev")) - allow))', r"\[\]", baseline=True),
    Probe("DEV-02", "sensitive device nodes",
          'print(*(tr(lambda d=d: os.open(d, os.O_RDWR)) for d in ("/dev/kvm", "/dev/fuse", "/dev/net/tun",'
          ' "/dev/loop-control", "/dev/kmsg", "/dev/mem", "/dev/vda", "/dev/sda")))', " ".join(["ENOENT"] * 8)),
    Probe("DEV-03", "SysV IPC shared with the host", "print(sc(29, @SHM_KEY@, 0, 0))", "ENOENT", baseline=True),
    Probe("DEV-04", "controlling TTY", 'print(tr(lambda: os.open("/dev/tty", os.O_RDWR)))', "ENXIO"),
    Probe("TIME-01", "set the clock", "print(sc(227, 0, None), sc(164, None, None))", "EPERM EPERM",
          baseline=True),
    Probe("TIME-03", "time namespace", "print(sc(272, 0x80))", "EPERM"),
]

BY_ID = {probe.id: probe for probe in PROBES}


def render(probe: Probe, tokens: dict[str, str]) -> list[str]:
    """The argv that runs `probe` (no shell around it), with the host canaries filled in."""
    code = probe.code if probe.sh else PRELUDE + probe.code
    for key, value in tokens.items():
        code = code.replace(f"@{key}@", value)
    return ["sh", "-c", code] if probe.sh else ["python3", "-c", code]


class Canaries:
    """Secrets planted on the host for the probes to look for; every output is grepped for them.

    Environment (`OPENAI_API_KEY`), a fake HOME with keys, a `.env` in the cwd, a loopback TCP
    service, an abstract unix socket, a process whose command line holds a key, and a SysV
    shared-memory segment. Use as a context manager; it restores what it changed.
    """

    MARK = "sk-canary"

    def __init__(self, root: Path) -> None:
        self.root = root
        self._undo: list[Callable[[], None]] = []

    def __enter__(self) -> dict[str, str]:
        home, cwd = self.root / "home", self.root / "project"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "id_rsa").write_text("sk-canary-HOME-KEY\n")
        (home / "victim.txt").write_text("untouched\n")
        cwd.mkdir()
        (cwd / ".env").write_text("OPENAI_API_KEY=sk-canary-DOTENV\n")
        self._setenv("OPENAI_API_KEY", "sk-canary-ENV")
        self._setenv("HOME", str(home))
        old_cwd = os.getcwd()
        os.chdir(cwd)
        self._undo.append(lambda: os.chdir(old_cwd))

        server = socket.create_server(("127.0.0.1", 0))
        abstract = socket.socket(socket.AF_UNIX)
        abstract_name = f"coderoom-canary-{os.getpid()}-{id(self)}"
        abstract.bind("\0" + abstract_name)
        abstract.listen()
        stop = threading.Event()
        threading.Thread(target=_serve, args=(server, stop), daemon=True).start()
        self._undo += [stop.set, server.close, abstract.close]

        # its sh keeps the canary in its cmdline; killed as a group, or its `sleep` outlived it 600 s
        holder = subprocess.Popen(["sh", "-c", "sleep 600", "sk-canary-CMDLINE"], start_new_session=True)
        self._undo.append(lambda: (os.killpg(holder.pid, signal.SIGKILL), holder.wait()))

        libc = ctypes.CDLL(None, use_errno=True)
        shm_key = 0xC0DE0000 | (os.getpid() & 0xFFFF)
        shm_id = libc.shmget(ctypes.c_int(shm_key), 4096, 0o1000 | 0o600)  # IPC_CREAT
        self._undo.append(lambda: libc.shmctl(shm_id, 0, None))  # IPC_RMID
        return {
            "HOME": str(home),
            "CWD": str(cwd),
            "HOST_PID": str(os.getpid()),
            "HOST_PREFIX": sys.base_prefix,
            "PORT": str(server.getsockname()[1]),
            "ABSTRACT": abstract_name,
            "NONCE": f"{os.getpid()}-{id(self)}",
            "SHM_KEY": str(ctypes.c_int(shm_key).value),
        }

    def _setenv(self, key: str, value: str) -> None:
        old = os.environ.get(key)
        os.environ[key] = value
        self._undo.append(lambda: os.environ.__setitem__(key, old) if old is not None else os.environ.pop(key, None))

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self._undo):
            undo()


def _serve(server: socket.socket, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.sendall(b"HOST-LOCAL-SERVICE sk-canary-TCP\n")


@dataclass
class ProbeRun:
    exit_code: int
    stdout: str
    stderr: str

    def leaked(self) -> bool:
        return Canaries.MARK in self.stdout or Canaries.MARK in self.stderr


async def run_probe(backend: str, probe: Probe, tokens: dict[str, str]) -> ProbeRun:
    """Run `probe` in a fresh session of `backend` with the probe's limits."""
    from coderoom.sandboxes import Limits, SandboxSpec
    from coderoom.sandboxes.session import open_session

    spec = SandboxSpec(backend=backend, limits=Limits(timeout=probe.timeout, **probe.limits))  # type: ignore[arg-type]
    async with open_session(spec, unconfined_no_isolation=backend == "unix_local") as session:
        result = await session.exec(*render(probe, tokens), shell=False)
    return ProbeRun(
        result.exit_code,
        result.stdout.decode(errors="replace"),
        result.stderr.decode(errors="replace"),
    )
