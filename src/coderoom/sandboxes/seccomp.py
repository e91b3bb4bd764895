"""A classic-BPF seccomp denylist for both sandboxes, assembled here (no libseccomp needed).

bubblewrap installs no syscall filter of its own; the local sandbox's launcher installs this
program in every command right before it executes it (with no_new_privs set). The docker sandbox
stacks the same program on Docker's default profile (image/init.py installs it). The policy follows
Docker's default profile plus what the attack catalogue adds (io_uring, TIOCSTI/TIOCLINUX,
exotic socket families, namespace flags on clone):

* a foreign architecture (i386 `int 0x80`, x32 numbers) kills the process: the syscall numbers
  below mean nothing there, so the only safe answer is no answer;
* kernel-facing calls an analysis script never needs fail with EPERM (`DENIED_SYSCALLS`);
* `clone` with any CLONE_NEW* flag fails with EPERM; `clone3` fails with ENOSYS, so libc falls
  back to `clone`, whose flags (unlike clone3's struct) can be inspected;
* `socket` is allowed for AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK only (else EAFNOSUPPORT);
* `ioctl(TIOCSTI|TIOCLINUX)` fails with EPERM, comparing the low 32 bits (CVE-2019-10063);
* `personality` is limited to the values glibc and Python use.

A backend may deny more (`build_filter`'s `also_denied` and `unsupported`): the local sandbox
answers `fallocate` with EOPNOTSUPP, so space cannot be reserved without writing it (glibc's
posix_fallocate then writes zeros, which the file-size and workspace limits see), and, without a
memory cgroup, refuses memfd_create and shmget (`NO_CGROUP_DENIED`): memory RLIMIT_AS does not count.
"""

from __future__ import annotations

import errno
import functools
import os
import struct
from dataclasses import dataclass, field

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6]  (little-endian arches)
_OFF_NR, _OFF_ARCH = 0, 4


def _arg_low(index: int) -> int:
    return 16 + 8 * index


# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K, _JGE_K, _JSET_K, _JA = 0x15, 0x35, 0x45, 0x05
_RET_K = 0x06

RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
_X32_SYSCALL_BIT = 0x40000000

CLONE_NEW_MASK = 0x7E020000  # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
ALLOWED_SOCKET_FAMILIES = (1, 2, 10, 16)  # AF_UNIX, AF_INET, AF_INET6, AF_NETLINK
DENIED_IOCTLS = (0x5412, 0x541C)  # TIOCSTI, TIOCLINUX
ALLOWED_PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

# Shared memory that outlives every mapping, refused where no memory cgroup counts it (local).
NO_CGROUP_DENIED = ("memfd_create", "shmget")

# Calls that fail with EPERM. Names are the kernel's; numbers per architecture below.
DENIED_SYSCALLS = (
    "ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd "
    "mount umount2 pivot_root chroot open_tree move_mount fsopen fsconfig fsmount fspick "
    "mount_setattr unshare setns "
    "keyctl add_key request_key bpf perf_event_open userfaultfd fanotify_init "
    "kexec_load kexec_file_load init_module finit_module delete_module "
    "clock_settime clock_adjtime settimeofday adjtimex sethostname setdomainname "
    "reboot swapon swapoff acct syslog quotactl quotactl_fd lookup_dcookie vhangup nfsservctl "
    "io_uring_setup io_uring_enter io_uring_register open_by_handle_at name_to_handle_at "
    "move_pages migrate_pages iopl ioperm uselib ustat sysfs _sysctl"
).split()

_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "pidfd_getfd": 438, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "unshare": 272, "setns": 308, "keyctl": 250,
    "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "fanotify_init": 300, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "clock_settime": 227, "clock_adjtime": 305,
    "settimeofday": 164, "adjtimex": 159, "sethostname": 170, "setdomainname": 171,
    "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "syslog": 103, "quotactl": 179,
    "quotactl_fd": 443, "lookup_dcookie": 212, "vhangup": 153, "nfsservctl": 180,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "move_pages": 279, "migrate_pages": 256,
    "iopl": 172, "ioperm": 173, "uselib": 134, "ustat": 136, "sysfs": 139, "_sysctl": 156,
    "clone": 56, "clone3": 435, "socket": 41, "ioctl": 16, "personality": 135,
    "fallocate": 285, "memfd_create": 319, "shmget": 29,
}  # fmt: skip

_AARCH64 = {
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
    "pidfd_getfd": 438, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "unshare": 97, "setns": 268, "keyctl": 219,
    "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
    "fanotify_init": 262, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
    "finit_module": 273, "delete_module": 106, "clock_settime": 112, "clock_adjtime": 266,
    "settimeofday": 170, "adjtimex": 171, "sethostname": 161, "setdomainname": 162,
    "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "syslog": 116, "quotactl": 60,
    "quotactl_fd": 443, "lookup_dcookie": 18, "vhangup": 58, "nfsservctl": 42,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_by_handle_at": 265, "name_to_handle_at": 264, "move_pages": 239, "migrate_pages": 238,
    "clone": 220, "clone3": 435, "socket": 198, "ioctl": 29, "personality": 92,
    "fallocate": 47, "memfd_create": 279, "shmget": 194,
}  # fmt: skip  (aarch64 has no iopl/ioperm/uselib/ustat/sysfs/_sysctl)


@dataclass(frozen=True)
class Arch:
    name: str
    audit: int
    table: dict[str, int] = field(hash=False)  # hashed by the rest: `build_filter` is cached
    x32_bit: bool


ARCHES = {
    "x86_64": Arch("x86_64", AUDIT_ARCH_X86_64, _X86_64, x32_bit=True),
    "aarch64": Arch("aarch64", AUDIT_ARCH_AARCH64, _AARCH64, x32_bit=False),
}


def arch_named(machine: str) -> Arch | None:
    """The Arch for a machine name as `uname -m` or Docker's Go names put it, or None."""
    machine = machine.lower()
    return ARCHES.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine))


def host_arch() -> Arch | None:
    """The filter's view of this machine, or None where we have no syscall table."""
    return arch_named(os.uname().machine)  # platform.machine(), without importing platform


class _Program:
    """A tiny assembler: instructions with symbolic jump targets, resolved on `encode`."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | int, str | int, int]] = []
        self._labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def load(self, offset: int) -> None:
        self._code.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self._code.append((op, jt, jf, k))

    def goto(self, target: str) -> None:
        self._code.append((_JA, 0, 0, target))  # type: ignore[arg-type]

    def ret(self, value: int) -> None:
        self._code.append((_RET_K, 0, 0, value))

    def encode(self) -> bytes:
        out = bytearray()
        for pc, (op, jt, jf, k) in enumerate(self._code):
            if op == _JA:
                k = self._labels[k] - pc - 1  # type: ignore[index]
            else:
                jt, jf = (self._rel(pc, x) for x in (jt, jf))
            out += struct.pack("<HBBI", op, jt, jf, k)
        return bytes(out)

    def _rel(self, pc: int, target: str | int) -> int:
        if isinstance(target, int):
            return target
        offset = self._labels[target] - pc - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"jump to {target} out of range ({offset})")
        return offset


def errno_ret(code: int) -> int:
    return _RET_ERRNO | code


@functools.cache
def build_filter(arch: Arch, *, also_denied: tuple[str, ...] = (), unsupported: tuple[str, ...] = ()) -> bytes:
    """The BPF program (struct sock_filter[]) for `arch`, as prctl(PR_SET_SECCOMP) takes it;
    `also_denied` calls fail with EPERM too, `unsupported` ones with EOPNOTSUPP. Built once per
    process for each set of arguments (the same bytes every time; about 0.5 ms of every local
    session's start otherwise)."""
    p = _Program()
    p.load(_OFF_ARCH)
    p.jump(_JEQ_K, arch.audit, jt=1)
    p.ret(RET_KILL_PROCESS)
    p.load(_OFF_NR)
    if arch.x32_bit:
        p.jump(_JGE_K, _X32_SYSCALL_BIT, jf=1)
        p.ret(RET_KILL_PROCESS)
    for name in (*DENIED_SYSCALLS, *also_denied):
        if name in arch.table:
            p.jump(_JEQ_K, arch.table[name], jf=1)
            p.ret(errno_ret(errno.EPERM))
    for name in unsupported:
        p.jump(_JEQ_K, arch.table[name], jf=1)
        p.ret(errno_ret(errno.EOPNOTSUPP))
    p.jump(_JEQ_K, arch.table["clone3"], jf=1)
    p.ret(errno_ret(errno.ENOSYS))
    for name in ("clone", "socket", "ioctl", "personality"):
        p.jump(_JEQ_K, arch.table[name], jf=1)
        p.goto(name)
    p.ret(RET_ALLOW)

    p.label("clone")  # x86_64 and aarch64 both pass clone's flags first
    p.load(_arg_low(0))
    p.jump(_JSET_K, CLONE_NEW_MASK, jf=1)
    p.ret(errno_ret(errno.EPERM))
    p.ret(RET_ALLOW)

    p.label("socket")
    p.load(_arg_low(0))
    for family in ALLOWED_SOCKET_FAMILIES:
        p.jump(_JEQ_K, family, jt="allow")
    p.ret(errno_ret(errno.EAFNOSUPPORT))

    p.label("ioctl")
    p.load(_arg_low(1))
    for request in DENIED_IOCTLS:
        p.jump(_JEQ_K, request, jt="eperm")
    p.ret(RET_ALLOW)

    p.label("personality")
    p.load(_arg_low(0))
    for persona in ALLOWED_PERSONALITIES:
        p.jump(_JEQ_K, persona, jt="allow")
    p.label("eperm")
    p.ret(errno_ret(errno.EPERM))
    p.label("allow")
    p.ret(RET_ALLOW)
    return p.encode()


def run_filter(program: bytes, *, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate `program` for one syscall, as the kernel would. For tests of foreign arches."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = insns[pc]
        pc += 1
        if op == _LD_W_ABS:
            acc = struct.unpack_from("<I", data, k)[0]
        elif op == _RET_K:
            return k
        elif op == _JA:
            pc += k
        else:
            taken = {
                _JEQ_K: acc == k,
                _JGE_K: acc >= k,
                _JSET_K: bool(acc & k),
            }[op]
            pc += jt if taken else jf
