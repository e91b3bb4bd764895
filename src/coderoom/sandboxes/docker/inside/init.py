"""PID 1 of a coderoom Docker sandbox: reaps every child, exits on SIGTERM, runs commands from stdin.

Why a command server: `docker exec` costs ~50 ms per command (runc joins the namespaces every
time); a request on the container's attached stdin costs a fork. Each command runs the way a
one-shot sandbox command runs on the local backend: in its own session, with a wall-clock
deadline (exit 124), bounded output (first and last halves kept, a marker in between), stdin
from the request or /dev/null, a fresh empty HOME deleted afterwards (so login-shell and other
start-up files one command writes never run in the next: catalogue SES-02), and when it ends,
everything it started is killed.

Protocol: one JSON object per line each way. Request {"id", "argv", "cwd", "timeout", "limit",
"stdin" (base64 or null)}; reply {"id", "code", "timed_out", "out", "err"} (output base64) or {"id", "error"}.
Requests may carry "env" (extra variables). Operations (see the block at the end):
{"id", "op": "quiesce"} kills every other process; {"id", "op": "helper", "source", "args",
"timeout"} quiesces, then runs host-sent Python in a forked child of PID 1, streaming its stdout
as {"id", "data"} replies before the final {"id", "code", "timed_out", "err"}.
A request with "live": true is a PTY session (issue 12): its output (stdout and stderr, or the
terminal's with "tty": true) goes out as {"id", "data"} replies as it comes, the final reply
carries no "out", "timeout" null means no wall clock (the run_python kernel only), and
{"id", "op": "stdin", "job", "data"} / {"id", "op": "kill", "job"} feed or kill the live job
whose request id is "job". A tty job runs on a pseudo-terminal opened here, in the container's
own devpts, as that terminal's session leader; its output is read by this process like a pipe's.
Only replies go to stdout. With --exit-on-eof, stdin closing (the host's attach connection
dropped: it exited or was killed) ends PID 1, so the container stops and auto-removes; unless
the host sent {"id", "op": "keep", "window": S} (a run is bound to the session, issue 20): then
PID 1 kills every other process and waits S seconds for the host's recovery, which saves the
workspace by running this file with --archive-once through `docker exec` (see `archive_once`),
before it exits.
With --contact-within=S, PID 1 also exits when nothing arrives on stdin within S seconds of its
start: a host killed after `docker start` but before it attached never closes a stdin it never
opened (the host sends an empty line as soon as it has attached).

Seccomp: Docker's default profile lets io_uring, AF_VSOCK/AF_ALG sockets, i386 `int 0x80` and x32
calls through (catalogue KERN-07, KERN-10, KERN-11). With --seccomp, PID 1 first stacks the local
backend's BPF program (seccomp.py, base64 in $CODEROOM_SECCOMP) on Docker's filter, so every command
inherits both; if that fails it refuses every command. Live jobs (PTY sessions, the Python kernel)
are commands of PID 1 too, so nothing coderoom starts needs `docker exec`.

Egress: with --egress=SOCKET:PORT (an allowlist; the container has no network but lo), PID 1
keeps the egress forwarder ($CODEROOM_FORWARDER's source, the local backend's
coderoom/egress/inside/forwarder.py) running: started before the first request and again before
any command that finds it gone (an archive's quiesce kills it, as it kills everything), in a
session of its own that ending a command's tree spares. It relays 127.0.0.1:PORT to the host
proxy's Unix socket; it decides nothing (the proxy on the host is the one enforcement point).

Standalone stdlib code run as `python3 -I -S init.py` (or -c), so it works in any image with
Python 3; it is also the image's CMD for manual `docker run`.
"""

import base64
import errno
import fcntl
import json
import os
import select
import shutil
import signal
import struct
import sys
import tempfile
import termios
import time

GRACE_S = 0.05  # after the command exits, how long its pipes may stay open before we cut them
CHUNK = 65536
OOM_COUNTERS = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
NO_HOME = "/nonexistent"  # HOME when /tmp is too full for a fresh one: nothing there to run
SECCOMP_ENV = "CODEROOM_SECCOMP"
FORWARDER_ENV = "CODEROOM_FORWARDER"
FORWARDER_READY_S = 30.0  # how long a starting forwarder may take to listen
FORWARDER_EXIT_S = 5.0  # how long a killed forwarder may take to exit before a command goes ahead
FORWARDER_POLL_S = 0.05  # how often a starting forwarder is checked for a stop while PID 1 waits for it
PF_EXITING = 0x4  # /proc/PID/stat's flags bit of a task that has begun to exit
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 22, 38, 2
TERMINAL_ROWS, TERMINAL_COLUMNS = 24, 80  # the size a tty job's terminal has
STDIN_PENDING_MAX = 1 << 20  # input bytes a live job may have waiting for it to read


class Capped:
    """The first and last `cap/2` bytes of a stream (same format as the local backend)."""

    def __init__(self, cap):
        self.head_cap, self.tail_cap = cap - cap // 2, cap // 2
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0

    def feed(self, data):
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            over = len(self.tail) - self.tail_cap
            if over > 0:
                del self.tail[:over]
                self.dropped += over

    def value(self):
        if not self.dropped:
            return bytes(self.head + self.tail)
        marker = ("\n[... truncated %d bytes ...]\n" % self.dropped).encode()
        return bytes(self.head) + marker + bytes(self.tail)


class Job:
    def __init__(self, rid, pid, home, timeout, limit, fds, stdin_fd, stdin_data):
        self.rid, self.pid, self.home = rid, pid, home
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.bufs = {fds[0]: Capped(limit), fds[1]: Capped(limit)}
        self.out_fd, self.err_fd = fds
        self.stdin_fd, self.stdin_data = stdin_fd, memoryview(stdin_data or b"")
        self.status = None
        self.exited_at = None
        self.timed_out = False
        self.oom_before = oom_kills()
        self.stream = False  # a helper, whose stdout goes out as "data" replies
        self.live = False  # a PTY session: its output goes out as "data" replies, its stdin stays open


def oom_kills():
    """The container's OOM-kill counter (cgroup v2 or v1), or None where it cannot be read."""
    for path in OOM_COUNTERS:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def proc_table():
    """pid -> (ppid, pgid, sid) for every process we can see."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[3]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def kill_job_tree(job, live_sids):
    """SIGSTOP then SIGKILL the job's session, its descendants, and orphans no live job owns."""
    me = os.getpid()
    victims = set()
    for _ in range(5):
        table = proc_table()
        found = set()
        for pid, (ppid, pgid, sid) in table.items():
            if pid == me:
                continue
            if sid == job.pid or pgid == job.pid or pid == job.pid:
                found.add(pid)
            elif ppid == me and sid not in live_sids and pid not in live_sids:
                found.add(pid)  # reparented to us: a leftover that left its session
        changed = True
        while changed:  # descendants that moved to another session or group
            changed = False
            for pid, (ppid, _, _) in table.items():
                if ppid in found and pid not in found and pid != me:
                    found.add(pid)
                    changed = True
        new = found - victims
        if not new:
            break
        for pid in new:
            signal_quietly(pid, signal.SIGSTOP)
        victims |= new
    for pid in victims:
        signal_quietly(pid, signal.SIGKILL)


def signal_quietly(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def fresh_home():
    try:
        return tempfile.mkdtemp(prefix="home-", dir="/tmp")
    except OSError:
        return NO_HOME


def remove_home(path):
    """Delete a command's HOME whatever it left there, unreadable directories included."""
    if path == NO_HOME:
        return
    try:
        os.chmod(path, 0o700)
    except OSError:
        return
    for root, dirs, _ in os.walk(path):  # top-down: each directory is opened after its chmod
        for name in dirs:
            child = os.path.join(root, name)
            if not os.path.islink(child):
                try:
                    os.chmod(child, 0o700)
                except OSError:
                    pass
    shutil.rmtree(path, ignore_errors=True)


def child_setup(stdin, stdout, stderr):
    """Set up a forked child of PID 1 that is no command (the egress forwarder, a host helper):
    a session of its own (ending a command's tree spares it), none of PID 1's signal handling
    (its wakeup fd, its SIGCHLD/SIGTERM/SIGINT handlers, SIGPIPE ignored by Python), `stdin`,
    `stdout` and `stderr` as fds 0-2 and no other descriptor of PID 1's left open."""
    os.setsid()
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGPIPE, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    os.dup2(stdin, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    os.closerange(3, 65536)


def spawn(argv, cwd, home, stdin_wanted, env=None, tty=False):
    """Fork argv in a session of its own; its output pipes (with `tty`: the terminal, and an
    empty stderr) and stdin's write end (None without `stdin_wanted`)."""
    err_r, err_w = os.pipe()
    if tty:
        master, slave = os.openpty()
        size = struct.pack("HHHH", TERMINAL_ROWS, TERMINAL_COLUMNS, 0, 0)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, size)
        out_r, out_w, in_r, in_w = master, slave, slave, os.dup(master)
    else:
        out_r, out_w = os.pipe()
        in_r, in_w = os.pipe() if stdin_wanted else (None, None)
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.setsid()
            if tty:
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                err_w = slave
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            try:  # if memory runs out, the command is the one to go, not pid 1
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write("1000")
            except OSError:
                pass
            stdin = in_r if in_r is not None else os.open(os.devnull, os.O_RDONLY)
            os.dup2(stdin, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, 65536)
            if cwd:
                os.chdir(cwd)
            os.execvpe(argv[0], argv, dict(os.environ, **(env or {}), HOME=home))
        except OSError as e:
            os.write(2, ("coderoom: cannot run %s: %s\n" % (argv[0], e.strerror)).encode())
            os._exit(127 if e.errno == errno.ENOENT else 126)
        finally:
            os._exit(127)
    for fd in {out_w, err_w, in_r} - {None}:
        os.close(fd)
    for fd in (out_r, err_r, in_w):
        if fd is not None:
            os.set_blocking(fd, False)
    return pid, (out_r, err_r), in_w


def exit_code(job):
    if job.timed_out:
        return 124
    status = job.status
    if status is None:
        return 137
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return 1


def dying(pid):
    """Whether `pid` is on its way out: a SIGKILL not yet acted on, an exit begun, or gone (a
    zombie, or no longer there). The pending signal is read before the flags, so a task between
    taking its SIGKILL and setting PF_EXITING is seen one way or the other."""
    try:
        with open("/proc/%d/status" % pid, "rb") as f:
            status = f.read()
        with open("/proc/%d/stat" % pid, "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return True
    kill_bit = 1 << (signal.SIGKILL - 1)
    for line in status.splitlines():
        name, _, value = line.partition(b":")
        if name in (b"SigPnd", b"ShdPnd") and int(value.strip() or b"0", 16) & kill_bit:
            return True
    return fields[0] in (b"Z", b"X") or int(fields[6]) & PF_EXITING != 0


class Forwarder:
    """The egress forwarder (see the module docstring): a child of PID 1, restarted when gone."""

    def __init__(self, source, socket_path, port):
        self.argv = [sys.executable, "-I", "-c", source, socket_path, str(port)]
        self.pid = None

    def ensure(self, reap):
        """Start it if it is not running and wait (FORWARDER_READY_S at most) until it listens.
        One that is dying (sandbox code's `kill -9 -1`) keeps its pid until `reap` (PID 1's)
        collects it, and the kernel may not have ended it yet when the next command comes in:
        reap until it is gone (FORWARDER_EXIT_S at most), or that command's fetches are refused.
        One that is stopped (sandbox code's `kill -STOP -1`; a SIGTSTP is discarded, its process
        group being orphaned) would hold every later fetch in its listen queue until the session
        ends: it is killed, and so collected and started afresh here (attack D-F11). One stopped
        before it listens (sandbox code in a live job stopping every process it can, again and
        again) is not waited for: PID 1 stalled FORWARDER_READY_S before every command (T-A1)."""
        if self.pid is not None and task_state("/proc/%d/stat" % self.pid) in (b"T", b"t"):
            signal_quietly(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + FORWARDER_EXIT_S
        reap()
        while self.pid is not None and dying(self.pid) and time.monotonic() < deadline:
            time.sleep(0.001)
            reap()
        if self.pid is not None:
            return
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                null = os.open(os.devnull, os.O_RDWR)
                child_setup(null, ready_w, null)
                os.chdir("/")
                os.execv(self.argv[0], self.argv)
            finally:
                os._exit(127)
        os.close(ready_w)
        self.pid = pid
        seen, deadline = b"", time.monotonic() + FORWARDER_READY_S
        try:
            while b"ready\n" not in seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if not select.select([ready_r], [], [], min(left, FORWARDER_POLL_S))[0]:
                    if task_state("/proc/%d/stat" % pid) in (b"T", b"t"):
                        break  # stopped before it listens: the next command's ensure kills it (T-A1)
                    continue
                chunk = os.read(ready_r, 64)
                if not chunk:
                    break
                seen += chunk
        finally:
            os.close(ready_r)

    def reaped(self, pid):
        if pid == self.pid:
            self.pid = None


class Server:
    def __init__(self, exit_on_eof, refusal=None, contact_within=None, forwarder=None):
        self.exit_on_eof = exit_on_eof
        self.forwarder = forwarder  # with --egress
        # until the host's first byte: the time by which it must have attached, else we exit
        self.contact_deadline = None if contact_within is None else time.monotonic() + contact_within
        self.refusal = refusal  # why no command may run (the seccomp filter is missing)
        self.poller = select.poll()
        self.jobs = {}  # pid -> Job
        self.fd_job = {}  # pipe fd -> Job
        self.pending = b""
        self.out = b""  # replies not yet written
        self.paused = set()  # helper stdout fds not polled while replies back up
        self.idle = set()  # live jobs' stdin fds not polled while no input waits
        self.keep_window = None  # seconds to wait for a recovery once the host is gone ("keep")

    def run(self):
        if self.forwarder is not None and not self.refusal:
            self.forwarder.ensure(self.reap)
        sig_r, sig_w = os.pipe()
        for fd in (sig_r, sig_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(sig_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        signal.signal(signal.SIGINT, lambda *_: os._exit(0))
        os.set_blocking(0, False)
        self.poller.register(0, select.POLLIN)
        self.poller.register(sig_r, select.POLLIN)
        while True:
            for fd, event in self.poller.poll(self.wait_ms()):
                if fd == 0:
                    self.read_requests()
                elif fd == sig_r:
                    drain(sig_r)
                elif fd == 1:
                    self.flush()
                elif fd in self.fd_job:
                    self.pump(fd, event)
            self.reap()
            self.check_jobs()
            if self.contact_deadline is not None and time.monotonic() > self.contact_deadline:
                os._exit(0)  # no host ever attached

    def wait_ms(self):
        deadlines = [
            (job.exited_at + GRACE_S) if job.exited_at else job.deadline for job in self.jobs.values()
        ]
        if self.contact_deadline is not None:
            deadlines.append(self.contact_deadline)
        deadlines = [d for d in deadlines if d != float("inf")]  # the kernel has no wall clock
        if not deadlines:
            return None
        return max(0, int((min(deadlines) - time.monotonic()) * 1000) + 1)

    def read_requests(self):
        try:
            data = os.read(0, 1 << 20)
        except BlockingIOError:
            return
        self.contact_deadline = None  # the host has attached (an empty read is EOF: handled below)
        if not data:  # stdin closed: the host is gone (or there never was one)
            if self.keep_window is not None:
                self.await_recovery()
            if self.exit_on_eof:
                os._exit(0)
            self.poller.unregister(0)
            return
        self.pending += data
        while b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            if line.strip():
                self.start(line)

    def start(self, line):
        rid = home = None
        try:
            req = json.loads(line)
            rid = req["id"]
            if self.refusal:
                raise RuntimeError(self.refusal)
            if req.get("op") is not None:
                self.operation(rid, req)
                return
            if self.helper_running():  # nothing may run beside a host helper
                raise RuntimeError("the host is archiving the workspace")
            if self.forwarder is not None:
                self.forwarder.ensure(self.reap)
            env = {str(k): str(v) for k, v in (req.get("env") or {}).items()}
            argv = [str(a) for a in req["argv"]]
            stdin = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
            live = req.get("live") is True
            tty = live and req.get("tty") is True
            timeout = float("inf") if live and req["timeout"] is None else float(req["timeout"])
            home = fresh_home()
            pid, fds, in_w = spawn(argv, req.get("cwd"), home, stdin is not None or tty, env, tty)
        except Exception as e:  # a bad request, or fork failed (pids limit)
            if home is not None:
                remove_home(home)
            self.reply({"id": rid, "error": "%s: %s" % (type(e).__name__, e)})
            return
        job = Job(rid, pid, home, timeout, int(req["limit"]), fds, in_w, stdin)
        job.live = live
        self.add_job(job)

    def add_job(self, job):
        self.jobs[job.pid] = job
        fds, in_w = (job.out_fd, job.err_fd), job.stdin_fd
        for fd in fds:
            self.fd_job[fd] = job
            self.poller.register(fd, select.POLLIN)
        if in_w is not None:
            self.fd_job[in_w] = job
            self.poller.register(in_w, select.POLLOUT)

    def pump(self, fd, event):
        job = self.fd_job[fd]
        if fd == job.stdin_fd:
            try:
                sent = os.write(fd, job.stdin_data[:CHUNK]) if job.stdin_data else 0
                job.stdin_data = job.stdin_data[sent:]
            except BlockingIOError:
                return
            except OSError:  # the command closed its stdin
                job.stdin_data = memoryview(b"")
                self.close_fd(fd)
                job.stdin_fd = None
                return
            if job.stdin_data:
                return
            if job.live:  # kept open for the next input
                self.poller.unregister(fd)
                self.idle.add(fd)
            else:
                self.close_fd(fd)
                job.stdin_fd = None
            return
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: a terminal whose every other end is closed
            data = b""
        if data and (job.live or job.stream and fd == job.out_fd):
            self.relay(job, data, fd)
        elif data:
            job.bufs[fd].feed(data)
        else:
            self.close_fd(fd)

    def close_fd(self, fd):
        if fd in self.paused or fd in self.idle:  # not registered
            self.paused.discard(fd)
            self.idle.discard(fd)
        else:
            self.poller.unregister(fd)
        self.fd_job.pop(fd, None)
        os.close(fd)

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.forwarder is not None:
                self.forwarder.reaped(pid)
            job = self.jobs.get(pid)
            if job is not None and job.status is None:
                job.status = status
                job.exited_at = time.monotonic()

    def check_jobs(self):
        now = time.monotonic()
        for job in list(self.jobs.values()):
            if job.status is None and now >= job.deadline:
                job.timed_out = True
                job.deadline = now + 1.0  # re-kill once a second until it is reaped
                kill_job_tree(job, self.live_sids(job))
                continue
            if job.status is None:
                continue
            # its own fds only: one closed at EOF (a terminal's empty stderr, at once) may be
            # a newer job's by now, under the same number
            open_fds = [fd for fd in (job.out_fd, job.err_fd) if self.fd_job.get(fd) is job]
            # a helper's output is drained to EOF (it starts nothing that could hold
            # the pipe open), within QUIESCE_WAIT_S of its exit
            grace = QUIESCE_WAIT_S if job.stream else GRACE_S
            if open_fds and now < job.exited_at + grace:
                continue
            self.finish(job, open_fds)

    def live_sids(self, exclude):
        """The sessions a command's end spares: the other live jobs', the forwarder's."""
        sids = {pid for pid, job in self.jobs.items() if job is not exclude and job.status is None}
        if self.forwarder is not None and self.forwarder.pid is not None:
            sids.add(self.forwarder.pid)
        return sids

    def finish(self, job, open_fds):
        kill_job_tree(job, self.live_sids(job))
        for fd in open_fds:
            self.pump(fd, select.POLLIN)  # what is already in the pipe
            if self.fd_job.get(fd) is job:
                self.close_fd(fd)
        if job.stdin_fd is not None and self.fd_job.get(job.stdin_fd) is job:
            self.close_fd(job.stdin_fd)
        del self.jobs[job.pid]
        remove_home(job.home)
        code = exit_code(job)
        err = job.bufs[job.err_fd].value()
        # the host names the memory limit with its value (see sandboxes/stops.py)
        oom = code == 137 and job.oom_before is not None and (oom_kills() or 0) > job.oom_before
        self.reply(
            {
                "id": job.rid,
                "code": code,
                "timed_out": job.timed_out,
                "oom_killed": oom,
                "out": "" if job.stream or job.live else base64.b64encode(job.bufs[job.out_fd].value()).decode(),
                "err": base64.b64encode(err).decode(),
            }
        )

    def reply(self, message):
        self.out += json.dumps(message).encode() + b"\n"
        self.flush()

    def flush(self):
        while self.out:
            try:
                sent = os.write(1, self.out)
            except BlockingIOError:
                break
            self.out = self.out[sent:]
        self.resume_relays()
        try:
            if self.out:
                self.poller.register(1, select.POLLOUT)
            else:
                self.poller.unregister(1)
        except KeyError:
            pass


def drain(fd):
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def make_undumpable():
    """Same-uid sandbox code must not reach our stdin/stdout through /proc/1/fd or ptrace."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception as e:
        sys.stderr.write("coderoom init: could not mark pid 1 undumpable: %s\n" % e)


def install_filter():
    """Stack the BPF program from $SECCOMP_ENV on this process (and so on all it starts later);
    the variable is removed so commands do not inherit it. Returns None, or why it failed."""
    encoded = os.environ.pop(SECCOMP_ENV, "")
    try:
        import ctypes

        program = base64.b64decode(encoded, validate=True)
        if not program or len(program) % 8 or len(program) // 8 > 4096:
            return "no valid BPF program in $%s" % SECCOMP_ENV

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        code = ctypes.create_string_buffer(program, len(program))
        fprog = SockFprog(len(program) // 8, ctypes.addressof(code))
        libc = ctypes.CDLL(None, use_errno=True)
        ulong = ctypes.c_ulong
        if libc.prctl(PR_SET_NO_NEW_PRIVS, ulong(1), ulong(0), ulong(0), ulong(0)) != 0 or libc.prctl(
            PR_SET_SECCOMP, ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), ulong(0), ulong(0)
        ):
            return "prctl: %s" % os.strerror(ctypes.get_errno())
    except Exception as e:
        return "%s: %s" % (type(e).__name__, e)
    return None


# ---- quiesce and host helpers (issue 10, classes 4 and 5) -------------------------
# The host reads the workspace through a helper that runs here, as a forked child of PID 1 (no
# execve): it keeps PID 1's stacked seccomp filter and its undumpable flag (no ptrace, no
# /proc/PID/mem from sandbox code), and it starts only after every other process in the PID
# namespace is dead. "Every other process" is read from /proc, not from a pid file the sandbox
# could write: commands, their orphans, `setsid`/`nohup` leftovers and `docker exec` processes
# alike. While a helper runs, commands are refused; the helper has a deadline.

QUIESCE_ROUNDS = 20  # stop-and-kill passes before giving up (a pids-limited tree needs one or two)
QUIESCE_WAIT_S = 5.0  # how long SIGKILLed processes get to disappear
RELAY_HIGH = 4 << 20  # pause a helper's stdout while this many reply bytes wait for the host
KEEP_MAX_S = 3600  # the longest recovery window a "keep" may ask for
ARCHIVE_ENV = "CODEROOM_ARCHIVE"  # --archive-once: the archive helper's request
KEPT_NAME = "coderoom-kept"  # PID 1's name once it waits for a recovery, every other process dead


def live_pids():
    """pid -> state letter of every process but this one that still has a live thread. A process
    whose leading thread exited alone (the raw exit syscall, not exit_group) is listed as a
    zombie while its other threads run on: it counts as live, with its threads' state ("T" once
    all of them are stopped), so the kill passes stop and kill it like any other."""
    me, table = os.getpid(), {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        state = task_state("/proc/%s/stat" % name)
        if state in (b"Z", b"X"):
            state = threads_state(name)
        if state is not None and state not in (b"Z", b"X"):
            table[int(name)] = state
    return table


def task_state(stat_path):
    """The state letter in a /proc stat file, or None when it cannot be read (gone)."""
    try:
        with open(stat_path, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def threads_state(pid):
    """The state of a zombie leader's process from its other threads: None when none is alive,
    b"T" when all live ones are stopped, else the first running one's letter."""
    try:
        tasks = os.listdir("/proc/%s/task" % pid)
    except OSError:
        return None
    states = [task_state("/proc/%s/task/%s/stat" % (pid, tid)) for tid in tasks if tid != pid]
    live = [state for state in states if state is not None and state not in (b"Z", b"X")]
    if not live:
        return None
    running = [state for state in live if state not in (b"T", b"t")]
    return running[0] if running else b"T"


def kill_all_but_me(reap):
    """SIGSTOP every other process until a pass finds no new one and all are stopped, then
    SIGKILL them and wait until they are gone. Returns how many, or raises if some survive."""
    victims = set()
    for _ in range(QUIESCE_ROUNDS):
        deadline = time.monotonic() + QUIESCE_WAIT_S
        while True:
            live = live_pids()
            new = set(live) - victims
            for pid in new:
                signal_quietly(pid, signal.SIGSTOP)
            victims |= new
            # a pass with nothing new, and everything stopped: no one is left to fork
            if not new and all(state in (b"T", b"t") for state in live.values()):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.001)
        for pid in live_pids():
            signal_quietly(pid, signal.SIGKILL)
        while live_pids() and time.monotonic() < deadline:
            reap()
            time.sleep(0.005)
        reap()
        if not live_pids():
            return len(victims)
    raise RuntimeError("processes survived %d kill passes: %s" % (QUIESCE_ROUNDS, sorted(live_pids())))


def spawn_helper(source, args):
    """Fork a child that runs `source` (host-sent Python) with ARGS; stdout/stderr are pipes."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            child_setup(os.open(os.devnull, os.O_RDONLY), out_w, err_w)
            code = run_source(source, args)
        finally:
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    for fd in (out_r, err_r):
        os.set_blocking(fd, False)
    return pid, (out_r, err_r)


def run_source(source, args):
    """Run host-sent Python `source` with ARGS = `args` in this process; its exit code."""
    try:
        exec(compile(source, "coderoom-helper", "exec"), {"__name__": "coderoom_helper", "ARGS": args})
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    except BaseException as e:
        os.write(2, ("coderoom helper: %s: %s\n" % (type(e).__name__, e)).encode())
        return 1


def _operation(self, rid, req):
    op = req["op"]
    if op == "quiesce":
        self.reply({"id": rid, "killed": kill_all_but_me(self.reap)})
    elif op in ("stdin", "kill"):
        job = next((j for j in self.jobs.values() if j.live and j.rid == req["job"] and j.status is None), None)
        if job is None:
            raise ValueError("no live job %r" % req["job"])
        if op == "kill":
            kill_job_tree(job, self.live_sids(job))
        elif job.stdin_fd is not None:
            data = base64.b64decode(req["data"])
            if len(job.stdin_data) + len(data) > STDIN_PENDING_MAX:
                raise ValueError("over %d bytes of input already wait for the process" % STDIN_PENDING_MAX)
            job.stdin_data = memoryview(bytes(job.stdin_data) + data)
            if job.stdin_fd in self.idle:
                self.idle.discard(job.stdin_fd)
                self.poller.register(job.stdin_fd, select.POLLOUT)
        self.reply({"id": rid, "done": op})
    elif op == "keep":
        window = float(req["window"])
        if not 0 < window <= KEEP_MAX_S:
            raise ValueError("a recovery window is between 0 and %d s" % KEEP_MAX_S)
        self.keep_window = window
        self.reply({"id": rid, "done": op})
    elif op == "helper":
        if self.helper_running():
            raise RuntimeError("a helper is already running")
        kill_all_but_me(self.reap)
        self.reap()
        self.check_jobs()  # the killed commands' replies go out now
        pid, fds = spawn_helper(str(req["source"]), req.get("args"))
        job = Job(rid, pid, NO_HOME, float(req["timeout"]), 65536, fds, None, None)
        job.stream = True
        self.add_job(job)
    else:
        raise ValueError("unknown operation %r" % op)


def _await_recovery(self):
    """The host went away while a run was bound ("keep"): end every other process, as before an
    archive, so nothing changes the workspace; then wait `keep_window` seconds, reaping, for the
    host's recovery to save it (a `docker exec` of this file with --archive-once), and exit.
    Nothing is read or run meanwhile: stdin is closed for good (StdinOnce). The host removes the
    container once it has saved it; else it ends here, and the engine removes it (AutoRemove)."""
    deadline = time.monotonic() + self.keep_window
    try:
        kill_all_but_me(self.reap)
    except RuntimeError as e:  # something the kill passes cannot end: keep nothing half-alive
        sys.stderr.write("coderoom init: not waiting for a recovery: %s\n" % e)
        os._exit(0)
    set_name(KEPT_NAME)  # the sign --archive-once and the host wait for (no other process can set it)
    while time.monotonic() < deadline:
        self.reap()  # what a host's exec left behind
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    os._exit(0)


def set_name(name):
    """This process's name (/proc/self/comm): only a thread of PID 1 itself can change PID 1's."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
    except Exception as e:
        sys.stderr.write("coderoom init: could not set its name: %s\n" % e)


def archive_once(refusal):
    """--archive-once: this file run by the host's `docker exec` in a container whose owner died
    (see `_await_recovery`), to write the workspace tar to stdout the way the archive helper does:
    under the same stacked seccomp filter (refused without it) and undumpable, only once PID 1
    waits (its name is KEPT_NAME: it killed every other process) and alone with it, ended by
    SIGALRM at the host's deadline.
    $CODEROOM_ARCHIVE holds {"source", "args", "timeout"}, the archive helper's request."""
    if refusal:
        sys.stderr.write("workspace archive refused: %s\n" % refusal)
        os._exit(1)
    request = json.loads(os.environ.pop(ARCHIVE_ENV))
    signal.alarm(max(1, int(float(request["timeout"]) + 0.999)))
    try:
        with open("/proc/1/comm") as f:
            kept = f.read().strip() == KEPT_NAME
    except OSError:
        kept = False
    if not kept:
        sys.stderr.write("workspace archive refused: PID 1 is not waiting for a recovery (its host is attached, "
                         "or it is still killing the container's processes)\n")
        os._exit(1)
    others = sorted(pid for pid in live_pids() if pid != 1)
    if others:
        sys.stderr.write("workspace archive refused: other processes still run in the container: %s\n" % others[:20])
        os._exit(1)
    os._exit(run_source(str(request["source"]), request.get("args")))


def _helper_running(self):
    return any(job.stream and job.status is None for job in self.jobs.values())


def _relay(self, job, data, fd):
    self.reply({"id": job.rid, "data": base64.b64encode(data).decode()})
    if len(self.out) > RELAY_HIGH and fd in self.fd_job and fd not in self.paused:
        self.poller.unregister(fd)
        self.paused.add(fd)


def _resume_relays(self):
    if self.paused and len(self.out) <= RELAY_HIGH // 4:
        for fd in self.paused:
            if fd in self.fd_job:
                self.poller.register(fd, select.POLLIN)
        self.paused.clear()


Server.operation = _operation
Server.helper_running = _helper_running
Server.await_recovery = _await_recovery
Server.relay = _relay
Server.resume_relays = _resume_relays
# ---- end of quiesce and host helpers -----------------------------------------------------------


if __name__ == "__main__":
    args = sys.argv[1:]
    refusal = None
    if "--seccomp" in args:
        problem = install_filter()
        if problem:
            refusal = "the sandbox's seccomp filter could not be installed (%s)" % problem
            sys.stderr.write("coderoom init: %s\n" % refusal)
    make_undumpable()
    if "--archive-once" in args:
        archive_once(refusal)
    os.set_blocking(1, False)
    contact = [a.split("=", 1)[1] for a in args if a.startswith("--contact-within=")]
    egress = [a.split("=", 1)[1].rsplit(":", 1) for a in args if a.startswith("--egress=")]
    source = os.environ.pop(FORWARDER_ENV, "")  # never in a command's environment
    forwarder = Forwarder(source, egress[0][0], int(egress[0][1])) if egress and source else None
    Server(
        exit_on_eof="--exit-on-eof" in args, refusal=refusal, contact_within=float(contact[0]) if contact else None,
        forwarder=forwarder,
    ).run()
