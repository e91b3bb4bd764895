"""`--sandbox local`: bubblewrap isolation with no daemon (see `sandbox` for what it enforces).

* `sandbox`: `LocalSandbox`, the sandbox itself through the SDK-free core API (`start` hands
  one out); `host_dir`: its private folder on the host;
* `bwrap`: finding bubblewrap, the runtime binds, the synthetic /etc, bwrap's arguments;
  `probe_cache`: the probe's answer kept between processes (data, not trust);
* `spawn`: the start up to bwrap running the launcher, without asyncio (`prestart`);
  `gate`: bwrap's pid 1 waits there until it is in the memory cgroup (and, as root, bwrap's uid
  is checked), done by a thread while the host goes on; `procfs`: what the host reads of a
  process in /proc (a bwrap's pid 1 recognised there);
* `launcher` (host side) and `inside/launcher_inner` (in the sandbox, standard library only):
  one launcher per sandbox forks each command into namespaces of its own;
* `process`: pipes, bounded buffers and supervision of one command; `longlived`: processes
  that outlive a call (the run_python kernel);
* `session`: the Agents SDK's client and session classes, thin adapters over `LocalSandbox`
  (the only module here that imports the SDK).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import SandboxUnavailable
from ..base import Progress

if TYPE_CHECKING:  # bwrap, pydantic and the sandbox load when a sandbox is asked for
    from pydantic import BaseModel

    from ..orphans import Orphan
    from ..spec import SandboxSpec
    from . import bwrap, spawn
    from .sandbox import LocalSandbox


class LocalBackend:
    name = "local"
    leftovers = "session folder"
    isolates = True
    plain_spec = True  # reads spec.backend and spec.limits only: `sandbox run`'s fast path
    summary = "bubblewrap namespaces, seccomp and limits on this machine; no daemon (the default on Linux)"

    def unavailable_reason(self, spec: SandboxSpec) -> str | None:
        from . import bwrap, network

        return bwrap.probe()[1] or (network.unavailable_reason() if spec.limits.network else None)

    def info(self) -> str:
        from . import enforcement

        return enforcement.describe()

    def options_model(self) -> type[BaseModel]:
        from .options import LocalOptions

        return LocalOptions

    def prepare(self, spec: SandboxSpec, progress: Progress) -> None:
        """The sandbox runs the host's own Python read-only; a declared package environment is
        built now (once per content: `packages`), so a failed build is refused before a run."""
        _packages(spec, progress)

    def packages_lock(self, spec: SandboxSpec) -> dict[str, object] | None:
        """The declared packages and the exact versions installed for them, for the run record."""
        from . import packages

        built = packages.ensure(spec.environment)
        return None if built is None else built.lock(spec.environment.packages)

    async def start(self, spec: SandboxSpec) -> LocalSandbox:
        import asyncio

        from .sandbox import LocalSandbox

        site = await asyncio.to_thread(_packages, spec, None)
        sandbox = await LocalSandbox.create(spec.limits, _bubblewrap(spec), site)
        try:
            await sandbox.start()
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def prestart(self, spec: SandboxSpec) -> Prestarted | None:
        """Start `spec`'s sandbox now, before the caller loads asyncio (see `spawn`); None when
        `start` must do it all (network on, no usable bwrap: `start` then says why)."""
        from . import spawn

        early = spawn.prestart(spec.limits, _packages(spec, None))
        return None if early is None else Prestarted(*early)

    def client(self, spec: SandboxSpec) -> tuple[Any, None]:
        from .session import LocalSandboxClient

        return LocalSandboxClient(spec.limits, _bubblewrap(spec), packages=_packages(spec, None)), None

    def prune(self, skipped: list[str] | None = None) -> int:
        from .host_dir import prune

        return prune(skipped)

    def abandoned_runs(self, spec: SandboxSpec) -> list[Orphan]:
        """Workspaces of runs and live sessions whose owner died, to reopen with `spec`'s limits (see `orphans`)."""
        from .orphans import abandoned_runs

        return abandoned_runs(spec.limits)

    def commands(self) -> None:
        return None


class Prestarted:
    """A sandbox whose launcher `spawn.prestart` started: `finish` (in the event loop) hands out
    the `LocalSandbox`; `abandon` removes it if it is never wanted."""

    def __init__(self, plan: spawn.SandboxPlan, started: spawn.Started) -> None:
        self._parts: tuple[spawn.SandboxPlan, spawn.Started] | None = (plan, started)

    async def finish(self) -> LocalSandbox:
        from .sandbox import LocalSandbox

        assert self._parts is not None, "finished or abandoned already"
        parts, self._parts = self._parts, None
        return LocalSandbox.adopt(*parts)

    def abandon(self) -> None:
        """Remove it (a cgroup still busy leaves the folder, with its lease, to `prune`)."""
        if self._parts is not None:
            (plan, started), self._parts = self._parts, None
            started.close()
            try:
                plan._release_launch()
            except OSError:
                return
            from ...hostile import tree

            tree.remove_tree(plan.host_dir)


def _packages(spec: SandboxSpec, progress: Progress | None) -> Path | None:
    """The site-packages of `spec`'s package environment (built if it is not yet), or None (also
    for a plain spec, which declares none: `base.SandboxBackend.plain_spec`)."""
    environment = getattr(spec, "environment", None)
    if environment is None or not environment.packages:
        return None
    from . import packages

    built = packages.ensure(environment, progress)
    return None if built is None else built.site


def _bubblewrap(spec: SandboxSpec) -> bwrap.Bwrap:
    """bubblewrap for `spec`, or SandboxUnavailable: never unsandboxed, never the host's network."""
    from . import bwrap, network

    bw, reason = bwrap.probe()
    if bw is None:
        raise SandboxUnavailable(reason or "bubblewrap is unavailable")
    egress = network.unavailable_reason() if spec.limits.network else None
    if egress:
        raise SandboxUnavailable(egress)
    return bw


backend = LocalBackend()
