"""The bubblewrap probe's cache (local only): it saves the probe's bwrap runs, and a stale,
forged or odd cache file is ignored, never obeyed beyond the candidates found here."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import require_backend
from coderoom.sandboxes.local import bwrap, probe_cache


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A cache folder of the test's own, and a fresh in-process probe before and after."""
    require_backend("local")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bwrap.probe.cache_clear()
    yield probe_cache.cache_file()
    bwrap.probe.cache_clear()


def _no_bwrap_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every candidate the probe checks by running it."""
    checked: list[str] = []
    real = bwrap._check

    def check(path: str) -> str | None:
        checked.append(path)
        return real(path)

    monkeypatch.setattr(bwrap, "_check", check)
    return checked


def test_a_second_process_reuses_the_answer_without_running_bwrap(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, reason = bwrap.probe()
    assert first is not None, reason
    assert cache.is_file() and (cache.stat().st_mode & 0o777) == 0o600
    checked = _no_bwrap_runs(monkeypatch)
    bwrap.probe.cache_clear()  # as a new process would start
    assert bwrap.probe() == (first, None)
    assert checked == []


def test_a_cache_naming_another_binary_is_ignored(cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    first, _ = bwrap.probe()
    assert first is not None
    entry = json.loads(cache.read_text())
    entry["path"] = str(tmp_path / "evil-bwrap")  # right key, a path that is no candidate
    cache.write_text(json.dumps(entry))
    checked = _no_bwrap_runs(monkeypatch)
    bwrap.probe.cache_clear()
    assert bwrap.probe() == (first, None)
    assert checked  # probed again
    assert json.loads(cache.read_text())["path"] == first.path  # and the entry replaced


def test_a_changed_candidate_is_probed_again(cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A forged cache that names the failing candidate is stale once that candidate changes: the
    probe runs it, and refuses it, rather than trusting the file."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bwrap, "_candidates", lambda: [str(fake)])
    forged = {"key": probe_cache.key([str(fake)], bwrap._REQUIRED), "path": str(fake)}
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps(forged))
    os.utime(fake, ns=(1, 1))  # the candidate is not the one the entry describes
    checked = _no_bwrap_runs(monkeypatch)
    found, reason = bwrap.probe()
    assert found is None and reason is not None and "user namespaces" in reason
    assert checked == [str(fake)]


@pytest.mark.parametrize("odd", ["garbage", "huge", "fifo", "symlink", "list"])
def test_an_odd_cache_file_is_ignored_without_hanging(cache: Path, odd: str, tmp_path: Path) -> None:
    cache.parent.mkdir(parents=True)
    if odd == "garbage":
        cache.write_bytes(b"\xff{not json")
    elif odd == "huge":
        cache.write_text(" " * (probe_cache.MAX_BYTES + 1))
    elif odd == "fifo":
        os.mkfifo(cache)  # opened O_NONBLOCK, refused as not a regular file: no hang
    elif odd == "symlink":
        target = tmp_path / "elsewhere.json"
        target.write_text("{}")
        cache.symlink_to(target)
    else:
        cache.write_text("[1, 2, 3]")
    assert probe_cache.load(bwrap._candidates(), bwrap._REQUIRED) is None
    found, reason = bwrap.probe()
    assert found is not None, reason


def test_a_forged_answer_that_matches_fails_closed(cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The worst a forged file can do: name a candidate that cannot build the sandbox. The
    command then fails with an error; nothing runs outside a sandbox."""
    import asyncio
    from types import SimpleNamespace

    from coderoom.errors import SandboxFailed
    from coderoom.sandboxes.limits import Limits
    from coderoom.sandboxes.oneshot import run_once

    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bwrap, "_candidates", lambda: [str(fake)])
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"key": probe_cache.key([str(fake)], bwrap._REQUIRED), "path": str(fake)}))
    spec = SimpleNamespace(backend="local", limits=Limits())
    with pytest.raises(SandboxFailed):
        asyncio.run(run_once(spec, ["touch", str(tmp_path / "payload-ran")], None))  # type: ignore[arg-type]
    assert not (tmp_path / "payload-ran").exists()
