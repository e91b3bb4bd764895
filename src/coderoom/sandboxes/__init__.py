"""Execution environments: one sub-package per backend (`local/`, `docker/`) behind `base`'s
protocol, found by name through `registry`.

Importing this package imports neither the Agents SDK (`session.open_session` does) nor
pydantic: `SandboxSpec` loads on first use, so `coderoom --help` and usage errors stay fast
(`Limits` has no pydantic in it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import SandboxUnavailable
from .defaults import default_backend_name
from .limits import Limits, parse_size
from .registry import backend_names, get_backend

if TYPE_CHECKING:
    from .spec import SandboxSpec

_LAZY = {"SandboxSpec": ".spec"}

__all__ = [
    "Limits",
    "SandboxSpec",
    "SandboxUnavailable",
    "backend_names",
    "default_backend_name",
    "get_backend",
    "parse_size",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name], __name__), name)
