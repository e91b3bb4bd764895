"""The Python kernel that runs inside the sandbox, sent in as text by `python_kernel`.

Two processes, so the clock never depends on the code being run:
- the supervisor owns the timeout. It takes requests from the host, forwards each cell to the
  worker, interrupts it (SIGINT) at the deadline, and kills and re-forks it when it will not
  stop, crashes or is killed for memory. It reports plainly whether the variables survived.
- the worker owns the state: one namespace for the whole session, like a Jupyter kernel.

Two transports, both always served:
- the channel (`serve channel`, when the backend can start a process whose stdin and stdout
  are a pipe to the host: `PtySessions.start_channel`): one JSON line per request on stdin,
  `{"op": "run", "id": ID, "request": {...}}` (without "request": in its request file, as for
  the FIFOs; the host sends a large cell so) or `{"op": "interrupt", "id": ID}`, and one JSON
  line per reply on stdout, `{"id": ID, "reply": {...}}` after `{"id": ID, "ack": true}` when
  the cell starts, and a first `{"ready": true}`. No
  sandbox command per cell: a warm cell costs the kernel's own time and two pipe hops.
- the FIFOs (every backend, through `exec` only): the host runs a small bash client per cell
  that writes the request file and the line `run ID` into the FIFO `.coderoom/kernel/req`; the
  supervisor answers `ack ID` at once and `done ID` on `.coderoom/kernel/resp` when
  `.coderoom/kernel/resp-ID.json` is written, which the client prints.
The request `interrupt ID` (the host's cancel) interrupts cell ID as the deadline does: SIGINT,
then a kill after GRACE_S. The session's PTY API would cost at least 350 ms per call (its
minimum yield plus a fixed sleep), so it only starts the supervisor where no channel exists.
Started as `python3 -I -S -c BOOT SOURCE serve [channel]` (see BOOT): no file to tamper with, no
workspace module can shadow the standard library. Standard library only; pandas and matplotlib are used
when the cell has imported them.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import os
import re
import select
import signal
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeGuard

KERNEL_DIR = ".coderoom/kernel"
FIGURE_DIR = ".coderoom/figures"
ENV_ALLOWED = {
    "PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL", "TERM",
    "MPLBACKEND", "MPLCONFIGDIR", "VIRTUAL_ENV", "CONDA_PREFIX", "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_MAX_THREADS",
    "LD_LIBRARY_PATH",  # the local sandbox's relocated Python finds its libpython by it
    # an allowlisted sandbox's way out (`egress.session.sandbox_env`, set by the host, no secret in
    # it): the proxy and the trust roots that hold the session's CA; a test checks the two agree
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "NO_PROXY",
    "no_proxy", "PIP_PROXY", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT",
    "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS",
}  # fmt: skip
ENV_CLEAN_MARK = "CODEROOM_KERNEL"
# The one rule for which variables a kernel keeps, as the text of an expression of a name `k`:
# BOOT filters with this text before the kernel's source is compiled (none of this module's
# functions exists then), and `allowed` is the same text compiled, so the two cannot differ.
ENV_RULE = f"k in {tuple(sorted(ENV_ALLOWED))!r} or k.startswith('LC_')"
# `python3 -I -S -c BOOT SOURCE serve [channel]`: the host's environment for a sandbox command
# always holds more than ENV_ALLOWED (PWD, PYTHON* variables), so the first process only replaces
# it: started without `site` (-S: no site-packages, no .pth files to run; ~10 ms where a start
# with them costs 50-150 ms here), it execs the same command with `site`, without -S, in the
# clean environment and with the mark. One full interpreter start per kernel, not two; SOURCE
# is compiled and imports its modules only then, and its `main` checks the environment again.
# With `site` the process is not judged by os.environ: a .pth file or sitecustomize of an
# installed package may set a variable, and an exec for it found it again after each start, for
# ever (F-C9); `main` reads the environment it was started with (`started_clean`).
BOOT = (
    "import os,sys\n"
    f"e={{k:v for k,v in os.environ.items() if {ENV_RULE}}}\n"
    f"e[{ENV_CLEAN_MARK!r}]='1'\n"
    "a=getattr(sys,'orig_argv',None)\n"
    f"if a and (sys.flags.no_site or os.environ.get({ENV_CLEAN_MARK!r})!='1'):"
    "i=a.index('-c');os.execve(sys.executable,[o for o in a[:i] if o!='-S']+a[i:],e)\n"
    "exec(compile(sys.argv[1],'kernel_server.py','exec'))"
)
GRACE_S = 3.0  # after SIGINT (deadline or the host's interrupt), before the worker is killed
MAX_PENDING_INTERRUPTS = 64  # the latest `interrupt ID` lines kept (one may precede its cell's `run`)
MAX_REQUEST = 16 * 1024 * 1024
MAX_REPLY = 4 * 1024 * 1024
STREAM_HEAD, STREAM_TAIL = 8_000, 2_000  # bytes kept per stream per cell
MAX_VALUE = 6_000
MAX_TRACEBACK = 8_000
MAX_FIGURES = 8
MAX_TABLE_ROWS, MAX_TABLE_COLUMNS, MAX_TABLE_TEXT = 50, 20, 200  # record/events.py's bounds (a test ties them)
ID = re.compile(r"^[0-9a-f]{8,32}$")


# ---------------------------------------------------------------------------------------------
# framing between supervisor and worker: 4-byte length + JSON


def send_frame(fd: int, obj: object) -> None:
    data = json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8", "backslashreplace")
    payload = struct.pack(">I", len(data)) + data
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_exact(fd: int, size: int, deadline: float | None) -> bytes | None:
    """`size` bytes, or None at EOF; raises TimeoutError past `deadline`."""
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None) -> dict | None:
    header = read_exact(fd, 4, deadline)
    if header is None:
        return None
    (size,) = struct.unpack(">I", header)
    if size > MAX_REPLY:
        return None
    body = read_exact(fd, size, deadline)
    return None if body is None else json.loads(body)


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters omitted ...]\n{text[-tail:]}"


# ---------------------------------------------------------------------------------------------
# worker: the namespace, output capture, value formatting, figures


class Stream:
    """One captured file descriptor: keeps the head and the tail of what a cell wrote."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.carry = b""
        self.marker = b""
        self.seen = threading.Event()

    def expect(self, marker: bytes) -> None:
        self.marker = marker
        self.seen.clear()

    def feed(self, data: bytes) -> None:
        data = self.carry + data
        self.carry = b""
        if self.marker:
            at = data.find(self.marker)
            if at >= 0:
                self._keep(data[:at])
                self.carry = data[at + len(self.marker) :]
                self.marker = b""
                self.seen.set()
                return
            keep = len(self.marker) - 1
            data, self.carry = data[: len(data) - keep], data[len(data) - keep :]
        self._keep(data)

    def _keep(self, data: bytes) -> None:
        self.total += len(data)
        room = STREAM_HEAD - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail = (self.tail + data)[-STREAM_TAIL:]

    def take(self) -> str:
        text = bytes(self.head).decode("utf-8", "replace")
        omitted = self.total - len(self.head) - len(self.tail)
        if omitted > 0:
            text += f"\n[... {omitted} bytes of output omitted ...]\n"
        text += bytes(self.tail).decode("utf-8", "replace")
        self.head, self.tail, self.total = bytearray(), bytearray(), 0
        return text


class Capture:
    """fd 1 and 2 of the worker go to pipes drained by a thread: print(), C libraries and
    subprocesses are all captured, and a flood cannot use more than the kept head and tail."""

    def __init__(self) -> None:
        self.streams: dict[int, Stream] = {}
        for target in (1, 2):
            read_end, write_end = os.pipe()
            os.dup2(write_end, target)
            os.close(write_end)
            self.streams[read_end] = Stream()
        self.out, self.err = self.streams.values()
        self.stdout = sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
            line_buffering=True,
        )  # fmt: skip
        self.stderr = sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
            line_buffering=True,
        )  # fmt: skip
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        fds = list(self.streams)
        while fds:
            for fd in select.select(fds, [], [])[0]:
                data = os.read(fd, 65536)
                if data:
                    self.streams[fd].feed(data)
                else:
                    fds.remove(fd)

    def finish(self, cell: int) -> tuple[str, str]:
        """Everything written before now, per stream (a marker through each pipe orders it)."""
        for text in (self.stdout, self.stderr, sys.stdout, sys.stderr):
            try:
                text.flush()
            except Exception:  # a cell may have closed or replaced it
                pass
        marker = b"\x00coderoom-end-%d-%s\x00" % (cell, os.urandom(6).hex().encode())
        for fd, stream in zip((1, 2), (self.out, self.err)):
            stream.expect(marker)
            try:
                os.write(fd, marker)
            except OSError:  # the cell closed the descriptor: nothing more will arrive
                stream.seen.set()
        for stream in (self.out, self.err):
            stream.seen.wait(2.0)
        return self.out.take(), self.err.take()


def format_value(value: object) -> str:
    """repr, bounded; a DataFrame or Series as a compact table with its shape and dtypes."""
    kind = type(value).__name__
    if type(value).__module__.startswith("pandas") and kind in ("DataFrame", "Series"):
        pd = sys.modules["pandas"]
        options = ("display.max_rows", 20, "display.min_rows", 10, "display.max_columns", 20,
                   "display.width", 120, "display.max_colwidth", 40)  # fmt: skip
        with pd.option_context(*options):
            table = repr(value)
        if kind == "DataFrame":
            rows, cols = value.shape  # type: ignore[attr-defined]
            dtypes = ", ".join(f"{c}: {t}" for c, t in value.dtypes.items())  # type: ignore[attr-defined]
            header = f"DataFrame: {rows} rows x {cols} columns ({clip(dtypes, 600)})"
        else:
            header = f"Series {getattr(value, 'name', None)!r}: {len(value)} rows, dtype {value.dtype}"  # type: ignore
        return clip(f"{header}\n{table}", MAX_VALUE)
    return clip(repr(value), MAX_VALUE)


def table_text(item: object) -> str:
    """One cell, label or name as text of at most MAX_TABLE_TEXT characters, valid UTF-8 (a lone
    surrogate becomes its escape, so the reply stays readable JSON)."""
    text = item if isinstance(item, str) else str(item)
    if len(text) > MAX_TABLE_TEXT:
        text = text[: MAX_TABLE_TEXT - 1] + "\u2026"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:MAX_TABLE_TEXT]


def table_of(value: object) -> dict | None:
    """A DataFrame or Series as a bounded table for the page: its first MAX_TABLE_ROWS rows and
    MAX_TABLE_COLUMNS columns as text, and its true shape. None for any other value, and when
    pandas cannot give one (the text preview is still there)."""
    kind = type(value).__name__
    if not (type(value).__module__.startswith("pandas") and kind in ("DataFrame", "Series")):
        return None
    try:
        if kind == "Series":
            name = getattr(value, "name", None)
            frame = value.to_frame(name="value" if name is None else name)  # type: ignore[attr-defined]
        else:
            frame = value
        rows, columns = frame.shape  # type: ignore[attr-defined]
        shown = frame.iloc[:MAX_TABLE_ROWS, :MAX_TABLE_COLUMNS]  # type: ignore[attr-defined]
        return {
            "kind": kind,
            "rows": int(rows),
            "columns": int(columns),
            "header": [table_text(name) for name in shown.columns],
            "index": [table_text(label) for label in shown.index],
            "data": [[table_text(item) for item in row] for row in shown.itertuples(index=False, name=None)],
        }
    except Exception:  # a frame whose values cannot be shown as text
        return None


def png_size(path: str) -> tuple[int, int]:
    with open(path, "rb") as handle:
        header = handle.read(24)
    if header[:8] != b"\x89PNG\r\n\x1a\n":
        return 0, 0
    return struct.unpack(">II", header[16:24])


def describe_figure(fig: object) -> str:
    """A few words a text-only model can use: titles, axis labels, what is drawn."""
    parts = []
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None and suptitle.get_text():
        parts.append(f"suptitle {suptitle.get_text()!r}")
    for ax in fig.get_axes()[:6]:  # type: ignore[attr-defined]
        bits = []
        if ax.get_title():
            bits.append(f"title {ax.get_title()!r}")
        if ax.get_xlabel():
            bits.append(f"x {ax.get_xlabel()!r}")
        if ax.get_ylabel():
            bits.append(f"y {ax.get_ylabel()!r}")
        drawn = [f"{len(ax.lines)} lines"] if ax.lines else []
        if ax.collections:
            drawn.append(f"{len(ax.collections)} scatter/collections")
        if ax.patches:
            drawn.append(f"{len(ax.patches)} bars/patches")
        bits.append(", ".join(drawn) or "empty")
        parts.append("axes[" + "; ".join(bits) + "]")
    return clip(" ".join(parts), 600)


class Worker:
    def __init__(self, root: str) -> None:
        self.root = root
        self.running = False
        self.namespace: dict[str, object] = {
            "__name__": "__main__",
            "__builtins__": builtins,
            "display": self.display,
        }
        self.capture = Capture()

    def display(self, *objects: object) -> None:
        """Like Jupyter's display(): print each object as the cell's value would be shown."""
        for obj in objects:
            print(format_value(obj))

    def on_sigint(self, signum: int, frame: object) -> None:
        if self.running:  # a late SIGINT between cells must not break the protocol
            raise KeyboardInterrupt

    def execute(self, code: str, filename: str) -> object:
        import linecache

        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        tree = ast.parse(code, filename)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        assert last is None or isinstance(last, ast.Expr)
        exec(compile(tree, filename, "exec"), self.namespace)
        if last is None:
            return None
        expression = ast.Expression(last.value)
        return eval(compile(expression, filename, "eval"), self.namespace)

    def run(self, code: str, cell: int) -> dict:
        started = time.perf_counter()
        value_text, table, error, interrupted, figures = None, None, None, False, []
        self.running = True
        try:
            try:
                value = self.execute(code, f"<cell-{cell}>")
                if value is not None:
                    self.namespace["_"] = value
                    value_text = format_value(value)
                    table = table_of(value)
            except KeyboardInterrupt:
                interrupted = True
                error = user_traceback()
            except BaseException:  # SystemExit included: the kernel keeps running, as Jupyter's
                error = user_traceback()
            figures = self.save_figures(cell)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self.running = False
        stdout, stderr = self.capture.finish(cell)
        return {
            "cell": cell,
            "status": "interrupted" if interrupted else "error" if error else "ok",
            "stdout": stdout,
            "stderr": stderr,
            "value": value_text,
            "table": table,
            "error": error,
            "figures": figures,
            "duration_s": round(time.perf_counter() - started, 4),
        }

    def save_figures(self, cell: int) -> list[dict]:
        """Save and close every open pyplot figure, as Jupyter's inline backend shows them."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None or not plt.get_fignums():
            return []
        saved = []
        folder = os.path.join(self.root, FIGURE_DIR)
        try:
            os.makedirs(folder, exist_ok=True)
            for index, number in enumerate(plt.get_fignums()[:MAX_FIGURES], 1):
                fig = plt.figure(number)
                rel = f"{FIGURE_DIR}/cell-{cell}-{index}.png"
                path = os.path.join(self.root, rel)
                fig.savefig(path, format="png", dpi=min(float(fig.dpi), 100.0))
                width, height = png_size(path)
                saved.append({"path": rel, "width": width, "height": height,
                              "description": describe_figure(fig)})  # fmt: skip
        except Exception:
            print(f"[coderoom] could not save a figure:\n{user_traceback()}", file=sys.stderr)
        finally:
            plt.close("all")
        return saved


def user_traceback() -> str:
    """The traceback from the first frame of the user's cell on, without kernel frames, bounded."""
    kind, error, tb = sys.exc_info()
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
        tb = tb.tb_next
    if isinstance(error, SyntaxError):
        tb = None
    report = traceback.TracebackException(kind, error, tb)  # type: ignore[arg-type]
    report.stack = traceback.StackSummary.from_list(
        [frame for frame in report.stack if frame.filename != "kernel_server.py"]
    )
    return clip("".join(report.format()), MAX_TRACEBACK)


def worker_main(requests: int, replies: int, root: str) -> None:
    """Run in the forked child: serve cells until the supervisor goes away."""
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")  # under memory pressure, lose the worker, not the supervisor
    except OSError:
        pass
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the supervisor
    except Exception:
        pass
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("MPLCONFIGDIR", os.path.join("/tmp", f"coderoom-mpl-{os.getuid()}"))
    sys.path.append(root)  # workspace modules importable, never ahead of the standard library
    import warnings

    warnings.filterwarnings("ignore", message=".*non-interactive, and thus cannot be shown")
    worker = Worker(root)
    signal.signal(signal.SIGINT, worker.on_sigint)
    while True:
        try:
            request = read_frame(requests)
        except KeyboardInterrupt:
            continue
        if request is None:
            os._exit(0)
        send_frame(replies, worker.run(str(request["code"]), int(request["cell"])))


# ---------------------------------------------------------------------------------------------
# supervisor: requests, the clock, restarts


class Supervisor:
    def __init__(self, root: str) -> None:
        self.root = root
        self.dir = os.path.join(root, KERNEL_DIR)
        self.pid = 0
        self.requests = self.replies = -1
        self.token = os.urandom(8).hex()
        self.fifo_fds: list[int] = []
        self.pending = b""
        self.channel_pending = b""
        self.channel = False  # requests on stdin, replies on stdout (`serve channel`)
        # `run` requests read while a cell was running: (ident, the request if it came inline,
        # else None: it is in its request file; whether it came on the channel)
        self.queued: list[tuple[str, dict | None, bool]] = []
        self.interrupts: dict[str, None] = {}  # insertion-ordered: the oldest goes first

    def spawn(self) -> None:
        from_supervisor, to_worker = os.pipe()
        from_worker, to_supervisor = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (to_worker, from_worker, *self.fifo_fds):
                    os.close(fd)
                worker_main(from_supervisor, to_supervisor, self.root)
            finally:
                os._exit(70)
        os.close(from_supervisor)
        os.close(to_supervisor)
        self.pid, self.requests, self.replies = pid, to_worker, from_worker

    def reap(self, kill: bool) -> str:
        """Stop tracking the worker; say how it ended."""
        if kill:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _, status = os.waitpid(self.pid, 0)
        os.close(self.requests)
        os.close(self.replies)
        self.pid = 0
        if os.WIFSIGNALED(status):
            number = os.WTERMSIG(status)
            name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
            hint = " (the memory limit, or a kill)" if number == signal.SIGKILL else ""
            return f"killed by {name}{hint}"
        return f"exited with code {os.WEXITSTATUS(status)}"

    def read_requests(self, req: int) -> None:
        """Take what the host wrote: `run` idents are queued, `interrupt` idents remembered."""
        try:
            self.pending += os.read(req, 65536)
        except BlockingIOError:
            return
        *lines, self.pending = self.pending.split(b"\n")
        self.pending = self.pending[-256:]  # no line of ours is longer; a flood is dropped
        for line in lines:
            verb, _, ident = line.decode("ascii", "replace").partition(" ")
            if not ID.match(ident):
                continue
            if verb == "run":
                self.queued.append((ident, None, False))
            elif verb == "interrupt":
                self.remember_interrupt(ident)

    def remember_interrupt(self, ident: str) -> None:
        self.interrupts[ident] = None
        while len(self.interrupts) > MAX_PENDING_INTERRUPTS:
            del self.interrupts[next(iter(self.interrupts))]

    def read_channel(self) -> bool:
        """Take the host's JSON lines from stdin; False once it is closed (the host is gone)."""
        try:
            data = os.read(0, 1 << 20)
        except BlockingIOError:
            return True
        if not data:
            return False
        *lines, self.channel_pending = (self.channel_pending + data).split(b"\n")
        if len(self.channel_pending) > MAX_REQUEST:  # no request of the host's is this long
            self.channel_pending = b""
        for line in lines:
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):  # only the host writes here, but a cell can too
                continue
            ident = message.get("id") if isinstance(message, dict) else None
            if not isinstance(ident, str) or not ID.match(ident):
                continue
            if message.get("op") == "run":
                request = message.get("request")
                self.queued.append((ident, request if isinstance(request, dict) else None, True))
            elif message.get("op") == "interrupt":
                self.remember_interrupt(ident)
        return True

    def wait_reply(self, ident: str, deadline: float) -> str:
        """Wait for the worker's reply while listening for the host's `interrupt ident`.
        'reply' when it can be read, 'timeout' at the deadline, 'interrupt' on the request."""
        req = self.fifo_fds[0] if self.fifo_fds else -1
        sources = [self.replies] + ([req] if req >= 0 else []) + ([0] if self.channel else [])
        while True:
            if ident in self.interrupts:
                return "interrupt"
            wait = deadline - time.monotonic()
            if wait <= 0:
                return "timeout"
            readable = select.select(sources, [], [], wait)[0]
            if self.replies in readable:
                return "reply"
            if req in readable:
                self.read_requests(req)
            if 0 in readable and not self.read_channel():
                os._exit(0)  # the host closed the channel: nobody is left to answer

    def run(self, request: dict, ident: str = "") -> dict:
        if not self.pid:
            self.spawn()
        timeout = max(0.1, float(request["timeout"]))
        deadline = time.monotonic() + timeout
        reply, stuck, cause = None, False, "timeout"
        try:
            send_frame(self.requests, {"code": request["code"], "cell": request["cell"]})
            cause = self.wait_reply(ident, deadline)
            if cause != "reply":
                raise TimeoutError
            reply = read_frame(self.replies, deadline)
        except BrokenPipeError:
            pass
        except TimeoutError:
            os.kill(self.pid, signal.SIGINT)
            try:
                reply = read_frame(self.replies, time.monotonic() + GRACE_S)
            except TimeoutError:
                stuck = True
            if reply is not None and cause == "timeout":
                reply["timed_out"] = timeout
            elif reply is not None:
                reply["interrupted_on_request"] = True
        if reply is not None:
            return reply
        # Re-fork outside any `except` block: the worker must not inherit a handled exception.
        how = self.reap(kill=True)
        self.spawn()
        if stuck:
            began = f"timed out after {timeout:g} s" if cause == "timeout" else "was interrupted on request"
            detail = (
                f"{began} and did not stop on an interrupt within "
                f"{GRACE_S:g} s; the kernel was killed and restarted"
            )
            return {"status": "restarted", "state_lost": True, "detail": detail,
                    "interrupted_on_request": cause == "interrupt"}  # fmt: skip
        return {"status": "crashed", "state_lost": True,
                "detail": f"the kernel process {how}; it was restarted"}  # fmt: skip

    def serve(self, channel: bool = False) -> None:
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        for name in ("req", "resp"):
            path = os.path.join(self.dir, name)
            if os.path.lexists(path):
                os.unlink(path)
            os.mkfifo(path, 0o600)
        req = os.open(os.path.join(self.dir, "req"), os.O_RDWR | os.O_NONBLOCK)
        resp = os.open(os.path.join(self.dir, "resp"), os.O_RDWR | os.O_NONBLOCK)
        self.fifo_fds = [req, resp]
        owner = os.path.join(self.dir, "owner")
        with open(owner, "w") as handle:
            handle.write(self.token)
        self.spawn()
        self.channel = channel
        if channel:
            os.set_blocking(0, False)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)  # stdout and stderr reach the host as one stream: only our lines on it
            os.close(null)
            tell(1, {"ready": True})
        sources = [req, 0] if channel else [req]
        while True:
            if not self.queued:
                readable = select.select(sources, [], [], 1.0)[0]
                if not readable:
                    if not self.still_owner(owner):
                        return  # a newer supervisor took over this workspace
                    continue
                if req in readable:
                    self.read_requests(req)
                if 0 in readable and not self.read_channel():
                    return  # the host closed the channel
            while self.queued:
                ident, inline, on_channel = self.queued.pop(0)
                if on_channel:
                    tell(1, {"id": ident, "ack": True})
                    request = inline if inline is not None else self.load_request(ident)
                    tell(1, {"id": ident, "reply": self.reply_to(request, ident)})
                else:
                    say(resp, f"ack {ident}")
                    self.answer(ident)
                    say(resp, f"done {ident}")
                self.interrupts.pop(ident, None)

    def still_owner(self, owner: str) -> bool:
        try:
            with open(owner) as handle:
                return handle.read() == self.token
        except OSError:
            return False

    def load_request(self, ident: str) -> object:
        """The request the host wrote to its file (None if unreadable); the file is removed."""
        request_path = os.path.join(self.dir, f"req-{ident}.json")
        try:
            with open(request_path, "rb") as handle:
                raw = handle.read(MAX_REQUEST + 1)
            os.unlink(request_path)
            return json.loads(raw) if len(raw) <= MAX_REQUEST else None
        except (OSError, ValueError):
            return None

    def answer(self, ident: str) -> None:
        reply = self.reply_to(self.load_request(ident), ident)
        for name in os.listdir(self.dir):
            if name.startswith("resp-"):
                os.unlink(os.path.join(self.dir, name))
        temporary = os.path.join(self.dir, f".resp-{ident}")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(reply, handle, ensure_ascii=False, default=str)
        os.replace(temporary, os.path.join(self.dir, f"resp-{ident}.json"))


    def reply_to(self, request: object, ident: str) -> dict:
        if not valid_request(request):
            return {"status": "bad_request", "state_lost": False,
                    "detail": "the request could not be read"}  # fmt: skip
        return self.run(request, ident)


def valid_request(request: object) -> TypeGuard[dict[str, Any]]:
    return (
        isinstance(request, dict)
        and isinstance(request.get("code"), str)
        and type(request.get("cell")) is int
        and isinstance(request.get("timeout"), (int, float))
    )


def say(fd: int, line: str) -> None:
    try:
        os.write(fd, line.encode("ascii") + b"\n")
    except BlockingIOError:  # stale lines from vanished clients filled the FIFO
        pass


def tell(fd: int, message: dict) -> None:
    """One JSON line to the host on the channel (ASCII: no byte of it can be a newline)."""
    data = json.dumps(message, ensure_ascii=True, default=str).encode("ascii") + b"\n"
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
        except OSError:  # the host is gone
            os._exit(0)


# ENV_RULE compiled: this module's own constant text, never anything read from outside
allowed: Callable[[str], bool] = eval(f"lambda k: {ENV_RULE}")


def clean_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if allowed(k)}
    env[ENV_CLEAN_MARK] = "1"
    return env


def started_clean() -> bool:
    """Whether this process was started with the mark set to 1 and allowed variables only, read
    from /proc/self/environ: the environment as exec'd, which what `site` runs does not change
    (os.environ, which it may, would call for an exec after every start: F-C9)."""
    started: dict[str, str] = {}
    try:
        with open("/proc/self/environ", "rb") as handle:
            for entry in handle.read().split(b"\0"):
                if entry:  # a name given twice counts as os.environ counts it: the first
                    name, _, value = entry.decode("utf-8", "surrogateescape").partition("=")
                    started.setdefault(name, value)
    except OSError:  # no /proc: os.environ, as it is
        started = dict(os.environ)
    return started.get(ENV_CLEAN_MARK) == "1" and all(allowed(name) or name == ENV_CLEAN_MARK for name in started)


def main(argv: list[str]) -> None:
    if argv[1:2] != ["serve"] or argv[2:] not in ([], ["channel"]):
        raise SystemExit("usage: python3 -I -S -c BOOT SOURCE serve [channel]")
    if not started_clean() or sys.flags.no_site:
        # Re-exec with only harmless variables, so neither the kernel nor /proc/self/environ
        # holds anything the host environment leaked into the sandbox (and with `site`, so
        # cells can import the sandbox's packages).
        os.execve(sys.executable, [sys.executable, "-I", "-c", BOOT, *argv], clean_environment())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    Supervisor(os.getcwd()).serve(channel=argv[2:] == ["channel"])


if __name__ == "__main__":
    main(sys.argv[1:])
