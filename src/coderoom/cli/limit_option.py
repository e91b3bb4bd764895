"""`--limit NAME=VALUE`, the one way every command that starts a sandbox (`run`, `rerun`,
`serve`, `mcp`; `sandbox run` through its `OPTIONS` table) takes any sandbox limit. What the
flags mean is `sandboxes.limits.limits_from_flags`'s: the same names and the same errors."""

from __future__ import annotations

from typing import Annotated

import typer

from ..sandboxes.limits import FLAG_HELP

Limit = Annotated[list[str], typer.Option("--limit", help=FLAG_HELP)]
