"""The local sandbox's launcher: runs INSIDE the session's bubblewrap, standard library only.

bwrap starts this program once per session, with the session's namespaces (user, network, UTS,
cgroup), its mounts, and capabilities within its own user namespace. Each command then runs in
fresh PID, mount, IPC and cgroup namespaces with a fresh /proc, /tmp and /dev/shm, no capabilities,
the session's rlimits and the seccomp filter. A bwrap per command cost about 6 ms here; this
costs about 2, because the launcher prepares the next command's sandbox before it is asked for:

    launcher --fork--> preparer --clone(PARENT|NEWPID|NEWNS|NEWIPC|NEWCGROUP)--> init (pid 1) --fork--> stub

* preparer (`Preparer`): a copy of the launcher that clones each init on the launcher's request,
  so the one-threaded launcher is never busy cloning when a command's exit or the next request
  comes in; with CLONE_PARENT each init is the launcher's own child, reaped and held by it.

* init: pid 1 of the command's namespace; mounts /proc, /tmp, /dev/shm, forks the stub, reaps
  orphans and, once the command has exited, kills everything left in the namespace, reaps it
  all, sends the command's status on the slot's socket and exits with it. The launcher reports
  the exit on that message (or, if init died without one, once it has reaped init), so "exit
  reported" means "the whole tree is gone", and init's own exit (tearing down its copy of the
  launcher's memory) is not on the way of the report; a kill is a SIGKILL to init, which takes
  the namespace down with it. The launcher holds the command's mount namespace until it has
  reaped init (`Slot`): its unmounting is not on the way of the report either, and it happens
  before the launcher starts another command.
* stub: drops every capability (effective, permitted, inheritable; the launcher has already
  emptied the bounding and ambient sets), sets the rlimits, installs the seccomp filter, starts
  a new session with no signal blocked or ignored, then waits on its socket. Given a command, it
  takes the stdio pipes, closes everything else and executes the command.
* terminal (a request with "tty"): the stub opens a pseudo-terminal of the command's own devpts
  instance (init mounts a fresh one on /dev/pts for every command, so no other command, and
  nothing of the host, has a terminal it can open), forks the command onto it as the terminal's
  session leader, and relays between the terminal and its stdio pipes until the command exits
  (`_relay_terminal`). The relay runs after the capability drop, rlimits and seccomp filter like
  the command itself, holds nothing the command could not hold, and the host still sees pipes
  only, read with the same bounds as any output. TIOCSTI stays refused by the filter.

Such a prepared pair is a slot; the launcher keeps one ready and, as a command takes it, asks
its preparer for the next, which is cloned while the command runs without keeping the launcher
busy. The payload cannot reach the launcher or the preparer: they are outside the command's PID
namespace (no pid to signal or ptrace), non-dumpable, hold capabilities the payload lacks, and
their sockets are anonymous socketpairs closed before the payload starts.

Configuration, from files bwrap provides: the seccomp program, and settings with clone(2)'s
number here, the rlimits ([(resource, soft, hard), ...]), the tmpfs size in bytes and the
workspace's path (each command's cwd).

Protocol on the SOCK_SEQPACKET control socket, one message each. Host to launcher, `marshal`
data (the host is trusted here; marshal and the C socket module keep start-up short):
    {"op": "run", "id": N} with SCM_RIGHTS fds [stdin, stdout, stderr, request], request being
                            a memfd with {"argv": [...], "env": {...}, "tty": bool}
    {"op": "kill", "id": N}
Launcher to host, plain text the host parses strictly:
    b"ready"
    b"exit N CODE"
The host closing the socket stops the launcher, which kills every running command first.
"""

import _ctypes
import _signal as signal  # the C module: signal.py imports enum (~6 ms more at every start)
import _socket
import _struct as struct
import marshal
import posix as os  # the C module: os.py imports _collections_abc and posixpath (1.5 ms of every start)
import resource
import select
import sys


# libc through _ctypes, the C core of ctypes: `import ctypes` alone takes 3 ms of a session's
# start here. Every argument is a C long, pointers are bytes or an address.
class _Long(_ctypes._SimpleCData):
    _type_ = "l"


class _Char(_ctypes._SimpleCData):
    _type_ = "c"


class _Function(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Long


class _Libc:
    """libc's functions by name (`_libc.mount(...)`); integers are passed as C longs."""

    _handle = _ctypes.dlopen(None)  # type: ignore[arg-type]  # None: this program and its libc (dlopen(3))

    def __getattr__(self, name):
        function = _Function((name, self))

        def call(*args):
            return function(*[_Long(a) if isinstance(a, int) else a for a in args])

        setattr(self, name, call)  # found once, then a plain attribute
        return call


_libc = _Libc()

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWCGROUP = 0x20000, 0x08000000, 0x20000000, 0x02000000
CLONE_PARENT = 0x8000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# bwrap's read-only covers over the kernel knobs in /proc
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")
_MAX_MESSAGE = 65536
_STUB_FAILED = 127
_DEVPTS_OPTIONS = "newinstance,ptmxmode=0666,mode=0620"  # a command's own terminals
TERMINAL_ROWS, TERMINAL_COLUMNS = 24, 80  # the size a terminal command sees
_RELAY_CHUNK = 65536
_RELAY_DRAIN_S = 0.2  # after the command exits, how long its terminal's last output may take
_RELAY_DRAIN_MAX_S = 1.0  # and all of it: a process left writing on the terminal ends the drain
# how long a request waits for the slot it needs (about 1 ms to clone): a preparer silent this
# long is stopped or stuck, and the launcher stops rather than leave every command waiting
_PREPARER_WAIT_S = 10.0


def _check(result, what):
    if result != 0:
        err = _ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _c_string(text):
    return text.encode() if text else None


def _mount(source, target, fstype, flags, data=None):
    result = _libc.mount(_c_string(source), _c_string(target), _c_string(fstype), flags, _c_string(data))
    _check(result, f"mount {target}")


def _prctl(option, arg=0):
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl {option}")


def _limit_future_capabilities():
    """Empty the bounding and ambient sets: the launcher keeps the capabilities it has (it
    needs them to build namespaces) but no process it starts can ever gain one back."""
    with open("/proc/sys/kernel/cap_last_cap") as handle:
        last_cap = int(handle.read())
    for cap in range(last_cap + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")


_CAPSET_HEADER = struct.pack("Ii", _LINUX_CAPABILITY_VERSION_3, 0)  # this process
_NO_CAPABILITIES = bytes(2 * 3 * 4)  # two {effective, permitted, inheritable} u32 triples


def _drop_capabilities():
    _check(_libc.capset(_CAPSET_HEADER, _NO_CAPABILITIES), "capset")


class _Filter:
    """The seccomp program as the kernel takes it (a sock_fprog), built once in the launcher: every
    stub is a copy of it, so the program's buffer is at the same address in each."""

    def __init__(self, program):
        array_type = type("Program", (_ctypes.Array,), {"_type_": _Char, "_length_": len(program)})
        self._buffer = array_type.from_buffer_copy(program)  # alive as long as the launcher
        self.fprog = struct.pack("HxxxxxxQ", len(program) // 8, _ctypes.addressof(self._buffer))

    def install(self):
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self.fprog, 0, 0), "seccomp")


def _resolve(name, env):
    """argv[0] on the command's PATH, found with access() (execvpe's failed execs are slow)."""
    if "/" in name:
        return name
    for directory in env.get("PATH", "/usr/bin:/bin").split(":"):
        path = f"{directory or '.'}/{name}"
        if os.access(path, os.X_OK) and not _is_dir(path):
            return path
    return name


def _is_dir(path):
    """os.path.isdir without os.path: whether `path` names a directory (links followed)."""
    try:
        return os.stat(path).st_mode & 0o170000 == 0o040000  # S_IFMT, S_IFDIR
    except OSError:
        return False


def _recv(sock):
    """One message and the fds that came with it (close-on-exec)."""
    data, ancdata, _, _ = sock.recvmsg(_MAX_MESSAGE, _socket.CMSG_LEN(4 * 4), _socket.MSG_CMSG_CLOEXEC)
    fds = []
    for level, kind, payload in ancdata:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            count = len(payload) // 4
            fds += struct.unpack(f"{count}i", payload[: 4 * count])
    return data, fds


def _read_to_end(fd):
    """All of a file from its offset, then closed (os.read, not a file object: see `_stub`)."""
    chunks = []
    try:
        while chunk := os.read(fd, _MAX_MESSAGE):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _send_fds(sock, data, fds):
    sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])


def _exit_code(status):
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Config:
    """What every command of the session gets, made ready once in the launcher: each slot is a
    copy of it, and work done here is not redone (and its memory not copied) per command."""

    def __init__(self, seccomp, settings):
        self.seccomp = _Filter(seccomp)  # the BPF program, as the host built it
        self.clone_nr = settings["clone_nr"]  # this architecture's clone(2) number
        self.rlimits = _capped(settings["rlimits"])
        self.default_signals = _set_to_default()
        self.tmp_size = settings["tmp_size"]
        self.workspace = settings["workspace"]  # the sandbox's workspace root
        for name in ("mount", "capset"):  # resolved here, not in every slot (see `_Libc`)
            getattr(_libc, name)


def _set_to_default():
    """The signals a stub sets back to SIG_DFL for its command, which execve would leave ignored:
    those Python ignores or handles, and every one the launcher was started with ignored (the
    host's, through bwrap: a server run under nohup gave every command SIGHUP ignored, L-S4)."""
    ignored = {sig for sig in signal.valid_signals() if signal.getsignal(sig) == signal.SIG_IGN}
    return sorted(ignored | {signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM})


def _capped(rlimits):
    """[(resource, (soft, hard))]: none above the hard limit the launcher has, which every stub
    inherits unchanged (nothing between the launcher and a stub sets one)."""
    capped = []
    for res, soft, hard in rlimits:
        ceiling = resource.getrlimit(res)[1]
        if ceiling != resource.RLIM_INFINITY:
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        capped.append((res, (soft, hard)))
    return capped


def _stub(sock, config):
    """Become the command's process, ready but for the command itself; then wait for it."""
    try:
        os.setsid()
        for sig in config.default_signals:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.umask(0o022)
        for res, limits in config.rlimits:
            resource.setrlimit(res, limits)
        _drop_capabilities()
        config.seccomp.install()
    except OSError as exc:
        sys.stderr.write(f"coderoom: cannot prepare a command: {exc}\n")
        os._exit(_STUB_FAILED)
    try:
        _, fds = _recv(sock)
    except OSError:
        fds = []
    if len(fds) != 4:  # the launcher discarded this slot
        os._exit(_STUB_FAILED)
    request = marshal.loads(_read_to_end(fds.pop()))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)  # dup2 clears close-on-exec on the copy
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    argv, env = request["argv"], request["env"]
    try:
        os.chdir(config.workspace)  # the command's cwd, and its terminal relay's child's
    except OSError as exc:
        os.write(2, f"coderoom: cannot enter the workspace: {exc}\n".encode())
        os._exit(_STUB_FAILED)
    if request.get("tty"):
        os._exit(_relay_terminal(argv, env))
    _execute(argv, env)


def _execute(argv, env):
    """Replace this process with the command (never returns)."""
    try:
        os.execve(_resolve(argv[0], env), argv, env)
    except OSError as exc:
        os.write(2, f"coderoom: cannot run {argv[0]!r}: {exc}\n".encode())
    os._exit(_STUB_FAILED)


def _relay_terminal(argv, env):
    """Run the command on a new pseudo-terminal; relay stdin to it and its output to stdout.

    Returns the command's exit code once it has exited and its terminal's output is drained
    (bounded: a process it left holding the terminal does not keep the relay waiting).
    """
    import fcntl  # C modules, only for terminal commands
    import termios
    import time

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", TERMINAL_ROWS, TERMINAL_COLUMNS, 0, 0))
    child = os.fork()
    if child == 0:
        os.close(master)
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        for target in (0, 1, 2):
            os.dup2(slave, target)
        os.close(slave)
        _execute(argv, env)
    os.close(slave)
    exited = os.pidfd_open(child)
    inputs = [0, master, exited]
    status = None
    while status is None:
        readable, _, _ = select.select(inputs, [], [])
        if exited in readable:
            status = os.waitpid(child, 0)[1]
            break
        if master in readable and not _copy(master, 1):
            inputs.remove(master)  # EIO: nothing holds the terminal any more
        if 0 in readable and not _copy(0, master):
            inputs.remove(0)  # the host closed stdin; the terminal stays open
    deadline = time.monotonic() + _RELAY_DRAIN_MAX_S  # each wait for more output is bounded, and so
    while (left := deadline - time.monotonic()) > 0:  # are all of them (L-S5: a writer it left behind)
        if not (select.select([master], [], [], min(left, _RELAY_DRAIN_S))[0] and _copy(master, 1)):
            break
    return _exit_code(status)


def _copy(source, target):
    """One read from `source` written whole to `target`; False at end of file or EIO."""
    try:
        data = os.read(source, _RELAY_CHUNK)
    except OSError:
        return False
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(target, view):]
        except OSError:
            return False
    return bool(data)


def _first_to_go_at_the_memory_limit():
    """oom_score_adj 1000 for the command (init and all it starts): at the session's memory
    cgroup limit the kernel kills in the command, not the launcher. A command may lower it to 0
    (the launcher's), not below: raising needs no privilege, lowering under 0 does. /proc/self
    is writable for a dumpable process only, and nothing of the payload runs yet."""
    _prctl(PR_SET_DUMPABLE, 1)
    # os calls, not open(): its text layers write to more of the pages init shares with the
    # launcher, each copied at its first write, than the write itself costs
    fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, b"1000")
    finally:
        os.close(fd)
    _prctl(PR_SET_DUMPABLE, 0)


def _init(sock, config):
    """pid 1 of the command's PID namespace."""
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for name in _PROC_READ_ONLY:
            path = "/proc/" + name
            if os.access(path, os.F_OK):
                _mount(path, path, None, MS_BIND | MS_REC)
                _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        for path in ("/tmp", "/dev/shm"):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={config.tmp_size},mode=1777")
        _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, _DEVPTS_OPTIONS)
        _first_to_go_at_the_memory_limit()
    except OSError as exc:
        sys.stderr.write(f"coderoom: cannot set up a command's namespaces: {exc}\n")
        os._exit(_STUB_FAILED)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # pid 1: signals without a handler are ignored
    child = os.fork()  # (set before: each page init writes after the fork is copied first)
    if child == 0:
        _stub(sock, config)
    while True:
        pid, status = os.wait()
        if pid == child:
            break
    code = _exit_code(status)
    _empty_namespace()
    try:  # the launcher's end; the stub closed its copy before the command started
        sock.send(b"%d" % code)
    except OSError:
        pass  # the launcher is gone or discarded the slot: exiting says it all the same
    os._exit(code)


def _empty_namespace():
    """Kill every other process of this PID namespace and reap it: back in wait() each time one
    is reaped (a fork racing the kill is killed by the next round), done when init has no child
    left. Every process of the namespace descends from init (orphans are reparented to it, or to
    a subreaper below it, before their parent can be reaped) and none can enter it (setns needs
    capabilities the payload lacks), so then init is alone in it: the command's exit may be
    reported before init's own exit, which tears down its copy of the launcher's memory."""
    while True:
        try:
            os.kill(-1, signal.SIGKILL)  # pid 1 is spared: all but init
        except ProcessLookupError:
            pass
        try:
            os.wait()
        except ChildProcessError:
            return


class Slot:
    """A prepared command sandbox: its init's pid and pidfd, the socket to its stub and then to
    its init (which reports the command's exit on it, see `_init`), and its mount namespace
    (`mounts`). Once started it has its command's id (`command`) until the exit is reported.

    The launcher holds the mount namespace so that init's exit does not tear it down: the last
    process of a namespace unmounts all of it (the session's 30 or so mounts, copied at the
    clone, and the command's /proc, /tmp, /dev/shm and /dev/pts) in its own exit, before its
    parent can see it gone, which delayed every command's exit report. `release` does it once
    init is reaped, after the report; a request that comes first waits for that (`Launcher._start`),
    so no later command starts before the namespace is gone, as before; only the host hears sooner."""

    def __init__(self, pid, sock):
        self.pid = pid
        self.sock = sock
        self.command = None
        self.mounts = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.pidfd = os.pidfd_open(pid)
        except OSError:
            os.close(self.mounts)
            raise

    def release(self):
        """Let the mount namespace go (torn down here if its init is gone)."""
        os.close(self.mounts)


def _clone_init(config, preparer_sock):
    """In the preparer: clone an init straight into new PID, mount, IPC and cgroup namespaces
    (fork() plus flags) as the launcher's child: its pid and the socket to it."""
    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    # a cgroup namespace of its own too, rooted at the session's memory cgroup, which bwrap's pid 1
    # joined after bwrap had made the session's one (at the gate: see the host's gate.py)
    flags = CLONE_PARENT | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWCGROUP | signal.SIGCHLD
    pid = _libc.syscall(config.clone_nr, flags, 0, 0, 0, 0)
    if pid == 0:
        preparer_sock.close()
        ours.close()
        _init(theirs, config)
    theirs.close()
    if pid < 0:
        ours.close()
        raise OSError(_ctypes.get_errno(), "cannot create a command's namespaces")
    return pid, ours


def _adopt(pid, sock):
    """The launcher's Slot for its child init `pid`; if that init is already gone, it is
    reaped and OSError raised."""
    try:
        return Slot(pid, sock)
    except OSError:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        sock.close()
        raise


class Preparer:
    """The launcher's one helper: it clones the next slots, so that the one-threaded launcher is
    never busy cloning (about 1 ms, more on a loaded machine) when a command's exit report or
    the next request comes in.

    Each init is cloned with CLONE_PARENT, so it is the launcher's child exactly as if the
    launcher had cloned it: the launcher reaps it, holds its pidfd and mount namespace, and its
    parent-death signal follows the launcher. The preparer is a copy of the launcher made before
    any slot (holding none of its fds), is outside every command's namespaces, like the
    launcher, and holds nothing a command hands over; it is as deep under bwrap as a command's
    init (`disk.LAUNCHER_DEPTH`). Protocol on its socketpair: the launcher sends b"p"; the
    preparer answers the init's pid with the slot's socket (SCM_RIGHTS), or b"-ERRNO" when the
    kernel refuses the clone (process limits), and exits when the launcher's end closes."""

    def __init__(self, config, launcher_sock):
        self.sock, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        self.asked = False  # a slot is asked for and not yet received
        self.pid = os.fork()
        if self.pid == 0:
            launcher_sock.close()
            self.sock.close()
            try:
                _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                self._serve(theirs, config)
            finally:
                os._exit(0)
        theirs.close()

    @staticmethod
    def _serve(sock, config):
        while sock.recv(16):
            try:
                pid, slot_sock = _clone_init(config, sock)
            except OSError as exc:
                sock.send(b"-%d" % exc.errno)
                continue
            _send_fds(sock, b"%d" % pid, [slot_sock.fileno()])
            slot_sock.close()

    def ask(self):
        if not self.asked:
            self.sock.send(b"p")
            self.asked = True

    def readable(self):
        """Whether receive() will not wait: the slot asked for has come, or the preparer is gone."""
        return bool(select.select([self.sock], [], [], 0)[0])

    def receive(self):
        """The slot asked for, or None when the kernel refused one now (retried later). Raises
        OSError if the preparer is gone (it speaks only when asked) or silent for
        `_PREPARER_WAIT_S`: the launcher stops, its commands end as lost and the host starts
        another launcher for the next command."""
        if not select.select([self.sock], [], [], _PREPARER_WAIT_S)[0]:
            raise OSError(f"the sandbox launcher's preparer did not answer in {_PREPARER_WAIT_S:g} s")
        data, fds = _recv(self.sock)
        self.asked = False
        if data.startswith(b"-") and data[1:].isdigit():
            err = int(data[1:])
            sys.stderr.write(f"coderoom: cannot create a command's namespaces: {os.strerror(err)}\n")
            return None
        if not data.isdigit() or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise OSError("the sandbox launcher's preparer is gone")
        try:
            return _adopt(int(data), _socket.socket(fileno=fds[0]))
        except OSError as exc:
            sys.stderr.write(f"coderoom: {exc}\n")
            return None

    def stop(self):
        self.sock.close()
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


class Launcher:
    def __init__(self, sock, config):
        self.sock = sock
        self.config = config
        self.ready = None  # the next command's Slot
        self.running = []  # started Slots whose init is not reaped yet (command None: reported)
        self.preparer = None

    def serve(self):
        self.preparer = Preparer(self.config, self.sock)  # before any slot: it holds none
        try:
            self.ready = self._take_ready()
            if self.ready is None:
                raise OSError("cannot create the first command's namespaces")
            self.sock.send(b"ready")
            self._loop()
        finally:
            self._stop_all()

    def _loop(self):
        failed = False  # the last slot was refused: asked again after the next message or exit
        while True:
            if self.ready is None and not failed:
                self.preparer.ask()
            watched = self._watched()
            readable, _, _ = select.select([self.sock, self.preparer.sock, *watched], [], [])
            failed = False
            for fd in readable:
                if fd is self.sock:
                    if not self._receive():
                        return
                elif fd is self.preparer.sock:
                    if self.preparer.readable():  # else taken meanwhile by a request (`_take_ready`)
                        self.ready = self.preparer.receive()
                        failed = self.ready is None
                elif watched[fd] is self.ready:
                    self._discard_ready()
                elif watched[fd] not in self.running:
                    continue  # reaped meanwhile (before a request that came with it): its fds are closed
                elif fd == watched[fd].pidfd:
                    self._reap(watched[fd])
                elif watched[fd].sock is not None:
                    self._on_report(watched[fd])

    def _watched(self):
        """fd -> Slot: every started slot's pidfd, and its socket until init has reported; the
        ready slot's pidfd too (a slot that died before use is replaced, not left a zombie)."""
        watched = {slot.pidfd: slot for slot in self.running}
        watched.update((slot.sock.fileno(), slot) for slot in self.running if slot.sock is not None)
        if self.ready is not None:
            watched[self.ready.pidfd] = self.ready
        return watched

    def _receive(self):
        try:
            data, fds = _recv(self.sock)
        except ConnectionResetError:
            return False
        if not data:
            return False
        message = marshal.loads(data)
        if message.get("op") == "run" and len(fds) == 4:
            self._start(message["id"], fds)
        elif message.get("op") == "kill":
            for slot in self.running:
                if slot.command == message["id"]:
                    os.kill(slot.pid, signal.SIGKILL)  # init: everything in its namespace dies
        for fd in fds:
            os.close(fd)
        return True

    def _take_ready(self):
        """The ready slot, waiting for the one asked for if need be (`Preparer.receive`: bounded);
        None when the kernel refuses one now (process limits)."""
        slot, self.ready = self.ready, None
        if slot is None:
            self.preparer.ask()
            slot = self.preparer.receive()
        return slot

    def _reap_reported(self):
        for slot in [slot for slot in self.running if slot.command is None]:
            self._reap(slot)  # its init is about to exit: no command starts before it is gone

    def _start(self, command_id, fds):
        self._reap_reported()
        for _ in range(2):
            slot = self._take_ready()
            if slot is None:
                break
            try:
                _send_fds(slot.sock, b"run", fds)
            except OSError:  # init and stub were killed before use: a fresh slot, once
                os.kill(slot.pid, signal.SIGKILL)
                self._reap(slot)
                continue
            slot.command = command_id
            self.running.append(slot)
            self.preparer.ask()  # the next slot, made while this command runs
            return
        os.write(fds[2], b"coderoom: cannot start the command: no process could be created\n")
        self.sock.send(b"exit %d %d" % (command_id, _STUB_FAILED))

    def _discard_ready(self):
        """The ready slot died before use (killed from outside): reap it; the loop asks for another."""
        slot, self.ready = self.ready, None
        self._reap(slot)

    def _on_report(self, slot):
        """Init's report: the command's exit code, sent once its namespace holds nothing else."""
        try:
            data = slot.sock.recv(16)
        except OSError:
            data = b""
        slot.sock.close()
        slot.sock = None
        if data.isdigit() and len(data) <= 3 and slot.command is not None:
            self._report(slot, int(data))

    def _report(self, slot, code):
        self.sock.send(b"exit %d %d" % (slot.command, code))
        slot.command = None

    def _reap(self, slot):
        """Init is gone (or about to be): reap it, report the exit if init could not (killed),
        and let the namespace go."""
        if slot in self.running:
            self.running.remove(slot)
        _, status = os.waitpid(slot.pid, 0)
        if slot.command is not None:
            self._report(slot, _exit_code(status))
        os.close(slot.pidfd)
        if slot.sock is not None:
            slot.sock.close()
        slot.release()

    def _stop_all(self):
        """Every command and slot killed and reaped; the preparer first, so that it makes none
        after (an init it was making is the launcher's child: its parent-death signal takes it)."""
        if self.preparer is not None:
            self.preparer.stop()
        slots = self.running + ([self.ready] if self.ready else [])
        for slot in slots:
            os.kill(slot.pid, signal.SIGKILL)
        for slot in slots:
            os.waitpid(slot.pid, 0)


def _own_cgroup(controller):
    """This process's path for `controller` ("" = the v2 line), as its cgroup namespace shows it.

    The session's namespace was made by bwrap before the gate, rooted where pid 1 was then (the
    host's cgroup): after the gate moved pid 1 into the session's memory cgroup the path names
    it; "/" means pid 1 went on at the gate without being admitted (bwrap goes on at EOF too,
    which is what it reads when the host dies there), so nothing may start."""
    with open("/proc/self/cgroup") as handle:
        for line in handle.read().splitlines():
            _, controllers, path = line.split(":", 2)
            if (controller in controllers.split(",")) if controller else controllers == "":
                return path
    return None


def main():
    """argv: the control socket's fd, the seccomp program's path, the settings' path."""
    _prctl(PR_SET_DUMPABLE, 0)
    _limit_future_capabilities()
    with open(sys.argv[2], "rb") as handle:
        seccomp = handle.read()
    with open(sys.argv[3], "rb") as handle:
        settings = marshal.loads(handle.read())
    if settings.get("admitted") is not None and _own_cgroup(settings["admitted"]) in (None, "/"):
        sys.stderr.write("coderoom: the sandbox was not admitted to its memory cgroup\n")
        os._exit(_STUB_FAILED)
    # The host's number for the control socket is 1024 or more on a busy host (a server with many
    # sessions open), out of select's range (FD_SETSIZE): the launcher then died at its first
    # select. It moves to the lowest free number (dup's copy is not inheritable).
    fd = os.dup(int(sys.argv[1]))
    os.close(int(sys.argv[1]))
    Launcher(_socket.socket(fileno=fd), Config(seccomp, settings)).serve()


if __name__ == "__main__":
    main()
