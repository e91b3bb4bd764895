"""Debian's Chromium driven by Playwright, for the web tests; loopback only.

No browser is downloaded: Playwright launches the system's `chromium` through `executable_path`
(CODEROOM_CHROMIUM overrides the path). Without Playwright or Chromium the browser tests skip,
unless CODEROOM_REQUIRE_BROWSER=1 (as in CI), where they fail.

The browser reaches nothing but the test server: no proxy, every host name but 127.0.0.1 fails to
resolve, background networking is off, and every request the page makes is checked by a route
that lets only the server's origin through and records anything else (the tests assert that list
is empty: the page asked for nothing outside). As root, Chromium's own sandbox cannot start, so it
runs with `chromium_sandbox=False` (Playwright's default); the page is the test's own.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("CODEROOM_CHROMIUM", "/usr/bin/chromium"))
ARGS = [
    "--no-proxy-server",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-domain-reliability",
    "--disable-sync",
    "--no-first-run",
    "--metrics-recording-only",
]
STEP_TIMEOUT_MS = 60_000  # of one page step; the test machine's cores are shared
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def require_browser() -> Any:
    """Playwright's sync API, or a skip (a failure under CODEROOM_REQUIRE_BROWSER=1) naming what is missing."""
    missing = None
    try:
        from playwright import sync_api
    except ImportError:
        missing = "Playwright is not installed (pip install playwright; no `playwright install` is needed)"
    if missing is None and not os.access(CHROMIUM, os.X_OK):
        missing = f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CODEROOM_CHROMIUM)"
    if missing is not None:
        if os.environ.get("CODEROOM_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CODEROOM_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    return sync_api


@contextmanager
def chromium(origin: str, outside: list[str]) -> Iterator[Any]:
    """A browser context that may reach `origin` only; anything else it asks for lands in `outside`."""
    sync_api = require_browser()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), chromium_sandbox=False, args=ARGS)
        try:
            context = browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 900})
            context.set_default_timeout(STEP_TIMEOUT_MS)

            def only_origin(route: Any) -> None:
                if route.request.url.startswith(origin + "/"):
                    route.continue_()
                else:
                    outside.append(route.request.url)
                    route.abort()

            context.route("**/*", only_origin)
            yield context
        finally:
            browser.close()


def screenshot(page: Any, name: str) -> None:
    """docs/screenshots/NAME.png, only when CODEROOM_SCREENSHOTS=1 (normal runs leave docs alone)."""
    if os.environ.get("CODEROOM_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
