"""bwrap's --json-status-fd, read on the host: where the sandbox's pid 1 (host pid) comes from.

bwrap 0.8 writes its first status line in several write(2) calls (`{ "child-pid": N`, the
namespace ids, ` }\\n`). A reader that parsed each read by itself and dropped what did not parse
lost the pid whenever it woke between two of them: the pipe then stayed empty for good and a
wait for the pid (a session with network on) hung (docs/reliability.md). Bytes are kept until a
whole line has come.
"""

from __future__ import annotations

import contextlib
import json
import os

MAX_STATUS_BYTES = 65536  # more than bwrap writes before reporting pid 1; past it, nothing more is read


class StatusPipe:
    """The read end of bwrap's status pipe (non-blocking), and the pid 1 it reported."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self._pending = b""
        self.child: int | None = None

    def child_pid(self) -> int | None:
        """The sandbox's pid 1 if bwrap has reported it by now; reads only what is there."""
        while self.child is None and self.fd >= 0 and len(self._pending) < MAX_STATUS_BYTES:
            try:
                data = os.read(self.fd, MAX_STATUS_BYTES - len(self._pending))
            except BlockingIOError:
                break
            if not data:  # EOF: bwrap has exited
                break
            self._pending += data
            *lines, self._pending = self._pending.split(b"\n")
            for line in lines:
                with contextlib.suppress(ValueError, AttributeError):
                    pid = json.loads(line).get("child-pid")
                    if isinstance(pid, int):
                        self.child = pid
                        break
        return self.child

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
