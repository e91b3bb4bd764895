"""What the conformance runner shows of a backend's log when tests fail there (conformance/
excerpts.py): each failing test's own section of a real pytest log (`--tb=native`, as run.py runs
the SDK's tests), and nothing of the tests that passed or failed as expected; a test that never
ran gets the log's end, which says why the run ended.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Loaded by path: conformance/ is not a package and not on sys.path (its modules are scripts).
_SPEC = importlib.util.spec_from_file_location(
    "excerpts", Path(__file__).resolve().parents[2] / "conformance" / "excerpts.py"
)
assert _SPEC is not None and _SPEC.loader is not None
excerpts = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(excerpts)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A real pytest log, run as run.py runs the SDK's tests: a plain test and a method failing,
    one failing in its fixture's setup, one passing, one failing as a listed test would, one
    whose name is too long for pytest's 80-column section header, and, in another file, a long
    failure of a test with the same name as the first."""
    folder = tmp_path_factory.mktemp("sdk")
    (folder / "test_sdk.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture-canary-setup")

        def test_real_failure():
            print("captured-canary")
            assert 1 + 1 == 3, "real-canary-call"

        def test_in_setup(broken):
            pass

        def test_expected_failure():
            raise PermissionError("listed-canary")

        def test_passes():
            pass

        def test_whose_name_is_longer_than_the_line_pytest_draws_around_the_title_of_its_section():
            raise OSError("long-canary")

        class TestGroup:
            @pytest.mark.parametrize("x", ["a"])
            def test_method(self, x):
                raise ValueError("method-canary")
    """))
    (folder / "other").mkdir()
    (folder / "other" / "test_namesake.py").write_text(textwrap.dedent("""
        def test_real_failure():  # the name of a test in test_sdk.py: the same section title
            raise PermissionError("long\\n" * 2000 + "namesake-canary")
    """))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--no-header", "--tb=native", "-p", "no:cacheprovider", "-o", "addopts=",
         "test_sdk.py", "other/test_namesake.py"],
        cwd=folder, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    return done.stdout


def test_each_failing_test_gets_its_own_traceback_and_output(log: str) -> None:
    shown = excerpts.of_tests(log, ["test_sdk.py::test_real_failure"])
    assert shown.startswith("  LOG test_sdk.py::test_real_failure\n")
    assert "real-canary-call" in shown and "captured-canary" in shown
    assert "listed-canary" not in shown and "fixture-canary-setup" not in shown and "method-canary" not in shown


def test_a_test_of_the_same_name_in_another_file_is_not_shown_as_this_ones(log: str) -> None:
    shown = excerpts.of_tests(log, ["test_sdk.py::test_real_failure"])
    assert "real-canary-call" in shown and "namesake-canary" not in shown
    namesake = excerpts.of_tests(log, ["other/test_namesake.py::test_real_failure"])
    assert "namesake-canary" in namesake and "real-canary-call" not in namesake


def test_a_setup_error_and_a_class_method_are_found_by_their_node_ids(log: str) -> None:
    shown = excerpts.of_tests(log, ["test_sdk.py::test_in_setup", "test_sdk.py::TestGroup::test_method[a]"])
    assert "fixture-canary-setup" in shown and "method-canary" in shown
    assert "real-canary-call" not in shown and "listed-canary" not in shown


def test_a_test_whose_name_outgrows_its_header_line_is_found_and_ends_its_neighbours_section(log: str) -> None:
    long_name = "test_sdk.py::test_whose_name_is_longer_than_the_line_pytest_draws_around_the_title_of_its_section"
    assert "long-canary" in excerpts.of_tests(log, [long_name])
    assert "long-canary" not in excerpts.of_tests(log, ["test_sdk.py::test_expected_failure"])


def test_a_test_without_a_section_gets_the_end_of_the_log(log: str) -> None:
    shown = excerpts.of_tests(log, ["test_sdk.py::test_never_ran"], limit=400)
    assert "no section for this test" in shown
    assert "failed" in shown.splitlines()[-1]  # pytest's last line: the counts


def test_a_long_section_keeps_its_end_where_the_exception_is(log: str) -> None:
    shown = excerpts.of_tests(log, ["test_sdk.py::test_in_setup"], limit=120)
    assert "[...]" in shown and "RuntimeError: fixture-canary-setup" in shown
    assert len(shown) < 400
