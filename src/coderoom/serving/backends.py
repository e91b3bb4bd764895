"""Every sandbox backend a server offers, prepared before it listens.

Why before: preparing can take minutes (Docker builds its image when it is missing or stale) and
is blocking work; done on the first session's request it would stall the server's event loop and
every other client with it. A backend that cannot be prepared is a usage error (exit 2) before
any client is served.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..sandboxes.limits import Limits
from ..sandboxes.registry import prepare_backend
from ..sandboxes.spec import EnvironmentSpec, SandboxSpec


def prepare_backends(
    names: Iterable[str], limits: Limits, say: Callable[[str], None], environment: EnvironmentSpec | None = None
) -> None:
    """`registry.prepare_backend` (refused first when it cannot run here) for each of `names`
    with the server's limits and declared packages (`--package`: built now, so a package that
    cannot be installed is exit 2 before any session); its progress lines go to `say`, each
    prefixed by the backend's name."""
    for name in dict.fromkeys(names):
        spec = SandboxSpec(backend=name, limits=limits, environment=environment or EnvironmentSpec())
        prepare_backend(spec, _prefixed(name, say))


def _prefixed(name: str, say: Callable[[str], None]) -> Callable[[str], None]:
    return lambda line: say(f"{name}: {line}")
