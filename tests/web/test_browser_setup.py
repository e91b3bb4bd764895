"""CI never skips the browser tests silently: with CODEROOM_REQUIRE_BROWSER=1 a missing Chromium
is a failure, without it a skip that names what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from web import browser


def test_a_missing_chromium_is_a_failure_when_the_browser_is_required(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.setenv("CODEROOM_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="no Chromium at"):
        browser.require_browser()
    monkeypatch.delenv("CODEROOM_REQUIRE_BROWSER")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        browser.require_browser()
