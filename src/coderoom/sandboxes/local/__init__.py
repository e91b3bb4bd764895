"""`--sandbox local`: bubblewrap isolation with no daemon (see `session` for what it enforces).

* `bwrap`: finding bubblewrap, the runtime binds, the synthetic /etc, bwrap's arguments;
* `launcher` (host side) and `inside/launcher_inner` (in the sandbox, standard library only):
  one launcher per session forks each command into namespaces of its own;
* `process`: pipes, bounded buffers and supervision of one command; `longlived`: processes
  that outlive a call (the run_python kernel);
* `session`: the SDK's client and session classes over all that.
"""

from __future__ import annotations

from typing import Any

from ..base import Progress
from ..spec import SandboxSpec
from . import bwrap, enforcement, network


class LocalBackend:
    name = "local"
    leftovers = "session folder"
    isolates = True
    summary = "bubblewrap namespaces, seccomp and limits on this machine; no daemon (the default on Linux)"

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        return bwrap.probe()[1] or (network.unavailable_reason() if spec.limits.network else None)

    def info(self) -> str:
        return enforcement.describe()

    def prepare(self, spec: SandboxSpec, progress: Progress) -> None:
        """Nothing to build: the sandbox runs the host's own Python read-only."""

    def client(self, spec: SandboxSpec) -> tuple[Any, None]:
        from ...errors import SandboxUnavailable
        from .session import LocalSandboxClient

        bw, reason = bwrap.probe()
        if bw is None:  # fail closed: never run unsandboxed
            raise SandboxUnavailable(reason or "bubblewrap is unavailable")
        egress = network.unavailable_reason() if spec.limits.network else None
        if egress:  # never the host's network instead
            raise SandboxUnavailable(egress)
        return LocalSandboxClient(spec.limits, bw), None

    def prune(self) -> int:
        return 0

    def commands(self) -> None:
        return None


backend = LocalBackend()
