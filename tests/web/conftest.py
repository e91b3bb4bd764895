"""Fixtures of the web tests: one real `coderoom serve` per module, over a runs folder of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from web.page_fixtures import runs_dir  # noqa: F401  (fixture)
from web.served import Served, serve


@pytest.fixture(scope="module")
def server(runs_dir: Path) -> Iterator[Served]:
    served = serve(runs_dir)
    yield served
    served.stop()
