"""conformance/run.py loaded for tests. conformance/ is not a package: its modules are scripts
that import their siblings by generic names (`run`, `sdist`, `table`). The folder is on sys.path
for the import alone, and those names leave sys.modules again, so no other test finds them."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"


def runner() -> ModuleType:
    sys.path.insert(0, str(CONFORMANCE))
    try:
        import run

        return run
    finally:
        sys.path.pop(0)
        for name in ("run", "sdist", "table"):
            sys.modules.pop(name, None)
