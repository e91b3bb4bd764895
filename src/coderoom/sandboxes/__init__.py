"""Execution environments: one sub-package per backend (`local/`, `docker/`) behind `base`'s
protocol, found by name through `registry`.

Importing this package does not import the Agents SDK; `session.open_session` does.
"""

from ..errors import SandboxUnavailable
from .limits import Limits, parse_size
from .registry import backend_names, get_backend
from .spec import SandboxSpec, default_backend_name

__all__ = [
    "Limits",
    "SandboxSpec",
    "SandboxUnavailable",
    "backend_names",
    "default_backend_name",
    "get_backend",
    "parse_size",
]
