"""The not-applicable list of the SDK conformance run (conformance/not_applicable.toml) is code:
well formed, every group with a category, its backends and a reason. The conformance itself runs
in `.ci/run` (python conformance/run.py), which also fails on listed tests that pass or no longer
exist; this test needs neither the SDK's sdist nor a sandbox.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
from conformance_scripts import runner

# Loaded by path: conformance/ is not a package and not on sys.path (its modules are scripts).
_SPEC = importlib.util.spec_from_file_location(
    "not_applicable", Path(__file__).resolve().parents[2] / "conformance" / "not_applicable.py"
)
assert _SPEC is not None and _SPEC.loader is not None
not_applicable = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = not_applicable  # dataclasses look their module up by name
_SPEC.loader.exec_module(not_applicable)


def test_the_list_is_well_formed() -> None:
    na, problems = not_applicable.load()
    assert problems == []
    assert na.entries, "an empty list would make every listed-test check pass vacuously"
    assert {e.category for e in na.entries} <= set(na.categories)


def test_the_list_backends_are_registered() -> None:
    from coderoom.sandboxes.registry import backend_names

    assert set(not_applicable.BACKENDS) <= set(backend_names())


@pytest.mark.parametrize(
    ("group", "problem"),
    [
        ('category = "c"\nbackends = ["local"]\ntests = ["tests/sandbox/t.py::t"]', "missing keys ['reason']"),
        ('category = "c"\nbackends = ["local"]\nreason = ""\ntests = ["tests/sandbox/t.py::t"]', "the reason must say why"),
        ('category = "x"\nbackends = ["local"]\nreason = "' + "r" * 50 + '"\ntests = ["tests/sandbox/t.py::t"]', "is not one of"),
        ('category = "c"\nbackends = ["unix_local"]\nreason = "' + "r" * 50 + '"\ntests = ["tests/sandbox/t.py::t"]', "backends must be"),
        ('category = "c"\nbackends = ["local"]\nreason = "' + "r" * 50 + '"\ntests = ["t.py::t"]', "is not a node id"),
        ('category = "c"\nbackends = ["local"]\nreason = "' + "r" * 50 + '"\ntests = []', "tests must be a non-empty"),
    ],
)
def test_a_bad_group_is_named(tmp_path: Path, group: str, problem: str) -> None:
    path = tmp_path / "list.toml"
    path.write_text(f'[categories]\nc = "{"d" * 50}"\n\n[[group]]\n{group}\n')
    _, problems = not_applicable.load(path)
    assert any(problem in p for p in problems), problems


def test_a_test_listed_twice_for_a_backend_is_named(tmp_path: Path) -> None:
    def group(backends: str) -> str:
        return textwrap.dedent(f"""
            [[group]]
            category = "c"
            backends = {backends}
            reason = "{"r" * 50}"
            tests = ["tests/sandbox/t.py::t"]
        """)

    path = tmp_path / "list.toml"
    path.write_text(f'[categories]\nc = "{"d" * 50}"\n' + group('["local", "docker"]') + group('["docker"]'))
    _, problems = not_applicable.load(path)
    assert problems == ["group 2: tests/sandbox/t.py::t is listed twice for docker"]


def test_a_base_id_covers_its_parametrizations_only() -> None:
    entry = not_applicable.Entry("tests/sandbox/t.py::t", "local", "c", "r")
    listed = {entry.test: entry}
    assert not_applicable.match("tests/sandbox/t.py::t[a-b]", listed) is entry
    assert not_applicable.match("tests/sandbox/t.py::t_other", listed) is None
    assert not_applicable.unknown_ids(["tests/sandbox/t.py::t"], ["tests/sandbox/t.py::t[x]"]) == []
    assert not_applicable.unknown_ids(["tests/sandbox/t.py::gone"], ["tests/sandbox/t.py::t[x]"]) == [
        "tests/sandbox/t.py::gone"
    ]


def test_the_verdict_names_real_failures_stale_entries_and_unknown_ids() -> None:
    run = runner()
    entry = lambda test: not_applicable.Entry(test, "local", "c", "r")  # noqa: E731
    listed = {t: entry(t) for t in ("tests/sandbox/a.py::na", "tests/sandbox/a.py::fixed", "tests/sandbox/a.py::gone")}
    scope = ["tests/sandbox/a.py::ok", "tests/sandbox/a.py::na", "tests/sandbox/a.py::fixed",
             "tests/sandbox/a.py::real", "tests/sandbox/a.py::skip", "tests/sandbox/a.py::skip_here"]  # fmt: skip
    baseline = {t: run.Outcome("passed") for t in scope} | {"tests/sandbox/a.py::skip": run.Outcome("skipped")}
    outcomes = {
        "tests/sandbox/a.py::ok": run.Outcome("passed"),
        "tests/sandbox/a.py::na": run.Outcome("failed", "ValueError: root"),
        "tests/sandbox/a.py::fixed": run.Outcome("passed"),
        "tests/sandbox/a.py::real": run.Outcome("failed", "AssertionError"),
        "tests/sandbox/a.py::skip": run.Outcome("skipped", "no case folding"),
        "tests/sandbox/a.py::skip_here": run.Outcome("skipped", "only here"),
    }
    result = run.verdict("local", outcomes, scope, baseline, listed, 1.0)
    assert result.passed == ["tests/sandbox/a.py::ok", "tests/sandbox/a.py::fixed"]
    assert result.not_applicable == {"tests/sandbox/a.py::na": "c"}
    assert result.skipped == ["tests/sandbox/a.py::skip"]
    assert result.failed == {"tests/sandbox/a.py::real": "AssertionError", "tests/sandbox/a.py::skip_here": "skipped: only here"}
    assert set(result.stale) == {"tests/sandbox/a.py::fixed", "tests/sandbox/a.py::gone"}
    assert not result.ok


def test_a_listed_test_that_never_ran_is_a_failure_not_counted_as_not_applicable() -> None:
    """The list excuses a test that ran and failed on a backend; one missing from the run's report
    (never reached) says nothing of the backend, listed or not."""
    run = runner()
    test = "tests/sandbox/a.py::na"
    result = run.verdict("local", {}, [test], {test: run.Outcome("passed")},
                         {test: not_applicable.Entry(test, "local", "c", "r")}, 1.0)  # fmt: skip
    assert result.not_applicable == {} and result.failed == {test: "not run: the test did not run"}
    assert not result.ok
