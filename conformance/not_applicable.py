"""The list of SDK tests that cannot apply to a coderoom backend (`not_applicable.toml`), read and
checked. The list is code: every group names its category, the backends it covers and a reason,
and `problems()` is what both the repository's own test and the conformance runner hold it to.

A test id is a pytest node id relative to the SDK's source folder
(`tests/sandbox/test_x.py::test_y[param]`). An id without `[...]` covers every parametrization of
that test; a parametrized id covers that one only.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

LIST = Path(__file__).with_name("not_applicable.toml")
BACKENDS = ("local", "docker")  # the backends the conformance runs; every one of them isolates
MIN_REASON_CHARS = 40  # a reason says what the test relies on and why coderoom differs
_GROUP_KEYS = {"category", "backends", "reason", "tests"}


@dataclass(frozen=True)
class Entry:
    test: str
    backend: str
    category: str
    reason: str


@dataclass(frozen=True)
class NotApplicable:
    categories: dict[str, str]  # name -> what the category means
    entries: list[Entry]

    def for_backend(self, backend: str) -> dict[str, Entry]:
        return {e.test: e for e in self.entries if e.backend == backend}


def load(path: Path = LIST) -> tuple[NotApplicable, list[str]]:
    """The list and every problem with it (empty when it is well formed)."""
    data = tomllib.loads(path.read_text())
    problems: list[str] = []
    categories = data.get("categories", {})
    if not isinstance(categories, dict) or not categories:
        problems.append("[categories] must name each category with a description")
        categories = {}
    for name, text in categories.items():
        if not isinstance(text, str) or len(text.strip()) < MIN_REASON_CHARS:
            problems.append(f"category {name!r} needs a description of at least {MIN_REASON_CHARS} characters")
    for key in set(data) - {"categories", "group"}:
        problems.append(f"unknown top-level key {key!r}")
    entries: list[Entry] = []
    seen: set[tuple[str, str]] = set()
    for number, group in enumerate(data.get("group", []), 1):
        where = f"group {number}"
        missing, unknown = _GROUP_KEYS - set(group), set(group) - _GROUP_KEYS
        if missing or unknown:
            problems.append(f"{where}: missing keys {sorted(missing)}, unknown keys {sorted(unknown)}")
            continue
        reason, category, backends, tests = group["reason"], group["category"], group["backends"], group["tests"]
        if not isinstance(reason, str) or len(reason.strip()) < MIN_REASON_CHARS:
            problems.append(f"{where}: the reason must say why, in at least {MIN_REASON_CHARS} characters")
        if category not in categories:
            problems.append(f"{where}: category {category!r} is not one of [categories]")
        if not backends or not isinstance(backends, list) or set(backends) - set(BACKENDS):
            problems.append(f"{where}: backends must be a non-empty list of {list(BACKENDS)}")
            continue
        if not tests or not isinstance(tests, list):
            problems.append(f"{where}: tests must be a non-empty list of node ids")
            continue
        for test in tests:
            if not isinstance(test, str) or not test.startswith("tests/sandbox/") or "::" not in test:
                problems.append(f"{where}: {test!r} is not a node id under tests/sandbox/")
                continue
            for backend in backends:
                if (test, backend) in seen:
                    problems.append(f"{where}: {test} is listed twice for {backend}")
                seen.add((test, backend))
                entries.append(Entry(test, backend, category, reason.strip()))
    return NotApplicable(dict(categories), entries), problems


def base_id(nodeid: str) -> str:
    """The node id without its parametrization: `t.py::test[a-b]` -> `t.py::test`."""
    return nodeid.split("[", 1)[0] if nodeid.endswith("]") else nodeid


def match(nodeid: str, listed: dict[str, Entry]) -> Entry | None:
    """The entry that covers `nodeid`: its exact id, or its id without the parametrization."""
    return listed.get(nodeid) or listed.get(base_id(nodeid))


def unknown_ids(listed: Iterable[str], in_scope: Iterable[str]) -> list[str]:
    """Listed ids that match no test in scope (renamed or removed in the SDK, or never in scope)."""
    scope = set(in_scope)
    bases = {base_id(t) for t in scope}
    return sorted(t for t in set(listed) if t not in scope and t not in bases)
