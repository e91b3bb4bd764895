"""Backends by name: the built-ins plus any registered in the `coderoom.sandboxes` entry points.

Adding a backend is one sub-package with a `backend` object (see `base.SandboxBackend`) and
one line here or one entry point in its own distribution's metadata. A backend that does not
isolate (the SDK's `unix_local`, or a plugin that says `isolates = False`) is never offered: not
in `backend_names()`, so no job file, flag or record can name it; it is reached only by name
through `get_backend(name, unconfined_no_isolation=True)`, which benchmarks and tests use.

Tests run sessions, the page, export and MCP on a fake backend (no isolation), a plugin of this
kind that exists only under pytest (`tests/support/plugins`). Code that opens a sandbox may be
handed such a backend object by its caller (`backend_for`): an object, never a name from a
record or the environment, and one whose name the spec carries, so the record names what ran.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from typing import TYPE_CHECKING

from ..errors import SandboxUnavailable
from .base import Progress, SandboxBackend

if TYPE_CHECKING:  # pydantic not for --help
    from .spec import SandboxSpec

_BUILTIN = {
    "local": "coderoom.sandboxes.local:backend",
    "docker": "coderoom.sandboxes.docker:backend",
}
_UNCONFINED = {"unix_local": "coderoom.sandboxes.unconfined:backend"}


@functools.cache
def _plugins() -> dict[str, str]:
    """Entry points of other distributions (read once: the installed set does not change while
    coderoom runs, and every job validation and help text asks); a plugin cannot shadow a built-in.
    importlib.metadata is imported here, not above: it costs about 10 ms that a built-in needs not."""
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group="coderoom.sandboxes")}
    return {name: target for name, target in found.items() if name not in _BUILTIN and name not in _UNCONFINED}


@functools.cache
def _offered_plugins() -> list[str]:
    """The plugins that say they isolate (each loaded once to ask; none is installed normally)."""
    return [name for name, target in _plugins().items() if _load(target).isolates]


def backend_names() -> list[str]:
    """The backends a job, a flag or a record may name: every one of them isolates."""
    return [*_BUILTIN, *_offered_plugins()]


def get_backend(name: str, *, unconfined_no_isolation: bool = False) -> SandboxBackend:
    """The backend called `name`. An unconfined one only with `unconfined_no_isolation=True`."""
    if name in _UNCONFINED:
        if not unconfined_no_isolation:
            raise SandboxUnavailable(
                f"sandbox backend {name!r} has no isolation and is not offered; "
                f"choose one of: {', '.join(backend_names())}"
            )
        warnings.warn(f"sandbox backend {name!r} runs code on the host with no isolation", stacklevel=2)
        return _load(_UNCONFINED[name])
    targets = _BUILTIN if name in _BUILTIN else {**_plugins(), **_BUILTIN}
    if name not in targets:
        raise SandboxUnavailable(
            f"unknown sandbox backend {name!r}; choose one of: {', '.join(backend_names())}"
        )
    backend = _load(targets[name])
    if not backend.isolates:
        if not unconfined_no_isolation:
            raise SandboxUnavailable(f"sandbox backend {name!r} does not isolate; it is not offered")
        warnings.warn(f"sandbox backend {name!r} runs code on the host with no isolation", stacklevel=2)
    return backend


def prepare_backend(spec: SandboxSpec, progress: Progress) -> SandboxBackend:
    """The backend for `spec`, its image or environment made: what every command does before it
    starts a sandbox. A backend that cannot run here is refused first with its one-line reason
    (a missing optional extra says `pip install 'coderoom[docker]'`; a usage error, exit 2)
    rather than failing inside `prepare` with an import traceback."""
    backend = get_backend(spec.backend)
    reason = backend.unavailable_reason(spec)
    if reason is not None:
        raise SandboxUnavailable(reason)
    backend.prepare(spec, progress)
    return backend


def packages_lock(spec: SandboxSpec) -> dict[str, object] | None:
    """What the run record keeps of `spec`'s declared packages: the backend's lock (names and
    exact versions, from the environment it built) or, from a backend that builds none on the
    host, the declaration alone; None when no package is declared."""
    if not spec.environment.packages:
        return None
    lock = getattr(get_backend(spec.backend), "packages_lock", None)
    return lock(spec) if lock is not None else {"declared": spec.environment.packages}


def backend_for(
    spec: SandboxSpec, given: SandboxBackend | None = None, *, unconfined_no_isolation: bool = False
) -> SandboxBackend:
    """The backend that runs `spec`: `given` (an object the calling code chose: tests hand in
    the fake) when there is one, else the registry's by `spec.backend`. A given backend must
    carry the spec's name, so the record, which keeps the spec, names the backend that ran."""
    if given is None:
        return get_backend(spec.backend, unconfined_no_isolation=unconfined_no_isolation)
    if given.name != spec.backend:
        raise SandboxUnavailable(f"the backend handed in is {given.name!r}, the spec names {spec.backend!r}")
    return given


def _load(target: str) -> SandboxBackend:
    module_name, attribute = target.split(":")
    return getattr(importlib.import_module(module_name), attribute)
