"""Debian's Chromium driven by Playwright, for the web tests; loopback only.

Accessibility is checked with axe-core (npm), read from CODEROOM_AXE or the path CI's
browser-setup.sh installs it to; it is evaluated through the DevTools protocol, so the page's CSP
stays as strict as ever. Without it the accessibility checks skip (fail under
CODEROOM_REQUIRE_BROWSER=1).

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

import io
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
AXE = Path(os.environ.get("CODEROOM_AXE", "/var/cache/coderoom-ci/axe/node_modules/axe-core/axe.min.js"))
SERIOUS = ("serious", "critical")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def _missing(what: str) -> None:
    if os.environ.get("CODEROOM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"CODEROOM_REQUIRE_BROWSER=1 but {what}")
    pytest.skip(what)


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
        _missing(missing)
    return sync_api


def serious_accessibility_violations(page: Any) -> list[str]:
    """axe-core's serious and critical violations on `page` as it is now, one line each (rule, impact, where)."""
    if not AXE.is_file():
        _missing(f"no axe-core at {AXE} (npm install --prefix /var/cache/coderoom-ci/axe axe-core@4, or set CODEROOM_AXE)")
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text() + "\n;undefined")
    return page.evaluate(
        """async (serious) => {
          const { violations } = await axe.run(document, { resultTypes: ["violations"] });
          return violations.filter((v) => serious.includes(v.impact))
            .map((v) => `${v.id} (${v.impact}): ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", ")}`);
        }""",
        list(SERIOUS),
    )


@contextmanager
def chromium(origin: str, outside: list[str]) -> Iterator[Any]:
    """A browser context that may reach `origin` only; anything else it asks for lands in `outside`."""
    sync_api = require_browser()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), chromium_sandbox=False, args=ARGS)
        try:
            context = browser.new_context(accept_downloads=True, viewport={"width": 1280, "height": 800})
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


def screenshot(page: Any, name: str, focus: str | None = None) -> None:
    """docs/screenshots/NAME.png (a 1280x800 window) and NAME-phone.png (390x844), only when
    CODEROOM_SCREENSHOTS=1 (normal runs leave docs alone). What fits in the window, in 256
    colours: each file stays well under 150 KB, and the repository small. `focus`: a selector
    whose last match is scrolled into view at each size (on a phone the panels stack, so what
    the step is about may be far below the top)."""
    if os.environ.get("CODEROOM_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        size = page.viewport_size
        for suffix, width, height in (("", 1280, 800), ("-phone", 390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            if focus is not None:
                page.locator(focus).last.scroll_into_view_if_needed()
            _save_small(page.screenshot(), SCREENSHOTS / f"{name}{suffix}.png")
        page.set_viewport_size(size)


def _save_small(png: bytes, path: Path) -> None:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
