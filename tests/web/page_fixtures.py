"""The browser fixtures of the page's tests (tests/web and the page's fault tests), one copy:
a runs folder per module, Chromium on a `server` (`context`, and a fresh `page` per test that
asserts it asked for nothing outside), and, for the tests of a model at work, the loopback
scripted model (`model`) with a `coderoom serve` offering it first (`server`). A module takes
them by importing their names; one that defines its own `server` or `model` uses that instead."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openai_server import OpenAIServer
from web.browser import chromium
from web.served import Served, serve


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("web") / "runs"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def model() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(runs_dir: Path, model: OpenAIServer) -> Iterator[Served]:
    """`coderoom serve` offering the scripted model first (the page's default) and the local sandbox."""
    served = serve(runs_dir, "--model", f"openai-compatible:scripted@{model.url}", "--sandbox", "local")
    yield served
    served.stop()


@pytest.fixture(scope="module")
def outside() -> list[str]:
    """What the page asked for outside the server (`browser.chromium` records it)."""
    return []


@pytest.fixture(scope="module")
def context(server: Served, outside: list[str]) -> Iterator[Any]:
    with chromium(server.base, outside) as context:
        yield context


@pytest.fixture
def page(context: Any, server: Served, outside: list[str]) -> Iterator[Any]:
    page = context.new_page()
    page.goto(f"{server.base}/#token={server.token}")
    page.wait_for_selector("body[data-ready='1']")
    assert server.token not in page.url  # the fragment left the address bar
    yield page
    page.close()
    assert outside == [], "the page asked for something outside the server"
