"""coderoom: files and a request go in, an agent writes and runs code in a sandbox, artifacts come out.

`coderoom.Session`, `coderoom.SessionManager` and `coderoom.WarmPool` (live sessions, see
`coderoom.service`) and `coderoom.capabilities_for` (the SDK capabilities each kind of model
can use, see `coderoom.capabilities`) load on first use, so `import coderoom` (and
`coderoom --help`) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__ as __version__

if TYPE_CHECKING:
    from .capabilities import capabilities_for
    from .service import Session, SessionManager, WarmPool

_SERVICE = ("Session", "SessionManager", "WarmPool")


def __getattr__(name: str) -> Any:
    if name in _SERVICE:
        from . import service

        return getattr(service, name)
    if name == "capabilities_for":
        from .capabilities import capabilities_for

        return capabilities_for
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
