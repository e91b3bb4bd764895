"""`network = true` for the local sandbox: a network namespace of its own, outbound internet only.

The session's bwrap always unshares the network namespace (only lo). With network on, a
slirp4netns attached to that namespace gives it tap0 (10.0.2.100/24, gateway 10.0.2.2, DNS
10.0.2.3) and makes its connections from the host as ordinary sockets. It runs as coderoom's
user (as root too: /dev/net/tun is often root's alone) with --enable-sandbox (an empty root
filesystem, every capability dropped but CAP_NET_BIND_SERVICE) and --enable-seccomp. What the sandbox can and cannot reach:

* the host's loopback: no. The sandbox's 127.0.0.1 and ::1 are its own lo, and
  --disable-host-loopback refuses 10.0.2.2, slirp's alias for the host's 127.0.0.1;
* private, shared, link-local (cloud metadata at 169.254.169.254), multicast and reserved IPv4
  ranges, and every IPv4 address of the host's own interfaces at session start: no. `prohibit`
  routes in the namespace answer connect() with EACCES; the sandbox has no CAP_NET_ADMIN to
  change them (every command drops its capabilities);
* IPv6: no (slirp4netns runs without --enable-ipv6: there is no IPv6 route);
* DNS: through 10.0.2.3, which slirp4netns forwards to the host's resolver (even a loopback one),
  the one host service the sandbox reaches;
* the rest of the IPv4 internet: yes, as the host's own connections would, through its routes.

Where slirp4netns, nsenter or ip are missing, a session with network on is refused
(SandboxUnavailable naming the tool); it never falls back to the host's namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import subprocess

from ...errors import SandboxUnavailable
from ..blocked_routes import prohibited_targets

TOOLS = ("slirp4netns", "nsenter", "ip")
_READY_TIMEOUT_S = 10.0
_NS_GET_USERNS = 0xB701  # ioctl on a namespace fd: the user namespace owning it


def unavailable_reason() -> str | None:
    """None when network = true can be given here, else which tool is missing."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return (
            f"network = true on the local sandbox needs {', '.join(missing)} (Debian: apt-get install "
            "slirp4netns util-linux iproute2), and never shares the host's network; use "
            "network = false or --sandbox docker"
        )
    return None


class Egress:
    """The slirp4netns of one session; `close` (or this process dying) stops it."""

    def __init__(self, process: subprocess.Popen[bytes], exit_w: int) -> None:
        self._process = process
        self._exit_w = exit_w

    @classmethod
    async def attach(cls, sandbox_pid: int) -> Egress:
        """Give the network namespace of host pid `sandbox_pid` (bwrap's pid 1) tap0 and the routes."""
        reason = unavailable_reason()
        if reason:
            raise SandboxUnavailable(reason)
        owner = _owner_of_netns(sandbox_pid)
        ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
        exit_r, exit_w = os.pipe2(os.O_CLOEXEC)
        argv = [
            "slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-sandbox",
            "--enable-seccomp", f"--userns-path=/proc/self/fd/{owner}", f"--ready-fd={ready_w}",
            f"--exit-fd={exit_r}", str(sandbox_pid), "tap0",
        ]  # fmt: skip
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                pass_fds=(ready_w, exit_r, owner), env={},
            )  # fmt: skip
        finally:
            for fd in (ready_w, exit_r, owner):
                os.close(fd)
        egress = cls(process, exit_w)
        try:
            signal = await asyncio.wait_for(_first_byte(ready_r), _READY_TIMEOUT_S)
            if signal != b"1":
                raise SandboxUnavailable(f"slirp4netns could not attach to the sandbox: {egress._stderr()}")
            await asyncio.to_thread(_prohibit, sandbox_pid)
        except BaseException:
            egress.close()
            raise
        return egress

    def _stderr(self) -> str:
        self._process.kill()
        _, err = self._process.communicate(timeout=5)
        return err.decode(errors="replace").strip() or "no reason given"

    def close(self) -> None:
        """Stop slirp4netns and reap it."""
        if self._exit_w >= 0:
            os.close(self._exit_w)  # --exit-fd: it exits on EOF
            self._exit_w = -1
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.communicate(timeout=5)
        if self._process.poll() is None:
            self._process.kill()
            self._process.communicate()


async def _first_byte(fd: int) -> bytes:
    """One byte from pipe `fd` (b"" at EOF), read in the event loop; closes `fd`, also when
    cancelled. Not in a thread: one still blocked in read(2) after a cancel would outlive the
    fd it was given, and read whatever file later took that number."""
    loop = asyncio.get_running_loop()
    readable = loop.create_future()
    os.set_blocking(fd, False)
    loop.add_reader(fd, lambda: None if readable.done() else readable.set_result(None))
    try:
        await readable
        return os.read(fd, 1)
    finally:
        loop.remove_reader(fd)
        os.close(fd)


def _owner_of_netns(sandbox_pid: int) -> int:
    """An fd of the user namespace that owns the sandbox's network namespace (bwrap's first one:
    with --disable-userns, pid 1 sits in a nested one that has no power over the network)."""
    net = os.open(f"/proc/{sandbox_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fcntl.ioctl(net, _NS_GET_USERNS)
    finally:
        os.close(net)


def _prohibit(sandbox_pid: int) -> None:
    """Add the `prohibit` routes inside the sandbox's namespaces (see the module docstring)."""
    batch = "".join(f"route add prohibit {target}\n" for target in prohibited_targets())
    argv = ["nsenter", f"--net=/proc/{sandbox_pid}/ns/net", "ip", "-batch", "-"]
    owner = -1 if os.geteuid() == 0 else _owner_of_netns(sandbox_pid)  # root may change any namespace
    if owner >= 0:
        argv[1:1] = [f"--user=/proc/self/fd/{owner}", "--preserve-credentials"]
    try:
        done = subprocess.run(
            argv, input=batch.encode(), capture_output=True, timeout=10, env={}, pass_fds=(owner,) if owner >= 0 else ()
        )
    finally:
        if owner >= 0:
            os.close(owner)
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip()
        raise SandboxUnavailable(f"cannot restrict the sandbox's routes: {detail}")
