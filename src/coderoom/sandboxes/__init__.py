"""Execution environments. One module per backend, all behind the SDK's sandbox client API."""

from .limits import Limits, parse_size
from .registry import SandboxUnavailable, backend_names, get_backend, open_session
from .spec import DEFAULT_IMAGE, SandboxSpec, default_backend_name

__all__ = [
    "DEFAULT_IMAGE",
    "Limits",
    "SandboxSpec",
    "SandboxUnavailable",
    "backend_names",
    "default_backend_name",
    "get_backend",
    "open_session",
    "parse_size",
]
