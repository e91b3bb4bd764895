"""The default backend, in a module of its own: the spec (pydantic) and the registry both need it,
and neither may import the other."""

from __future__ import annotations

import sys


def default_backend_name() -> str:
    """`local` (bubblewrap) on Linux; elsewhere Docker is the only real boundary we ship."""
    return "local" if sys.platform.startswith("linux") else "docker"
