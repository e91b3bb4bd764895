"""Which models the page offers: what the server was started with, else the CLI's default, and
always the offline analyst (it needs no key and no network)."""

from __future__ import annotations

import os
from collections.abc import Mapping


def default_models(given: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """`given` (the first is the default) or the default `coderoom run` would use, plus offline."""
    env = os.environ if environ is None else environ
    if not given:
        if env.get("CODEROOM_MODEL", "").strip():
            given = [env["CODEROOM_MODEL"].strip()]
        elif env.get("OPENAI_API_KEY", "").strip():
            from ..models.openai import DEFAULT_MODEL

            given = [f"openai:{DEFAULT_MODEL}"]
    return list(dict.fromkeys([*given, "offline"]))
