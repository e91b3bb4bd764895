"""Fixtures of the web tests: one real `coderoom serve` per module, over a runs folder of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from web.served import Served, serve


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("web") / "runs"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def server(runs_dir: Path) -> Iterator[Served]:
    served = serve(runs_dir)
    yield served
    served.stop()
