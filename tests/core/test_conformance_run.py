"""How the conformance runner (conformance/run.py) takes one pytest run of the SDK's tests: a run
whose tests all ran gives their outcomes, failures included (most of a backend's are expected);
a run that did not go through, though it wrote its report, fails the step rather than counting
the tests it never reached as whatever the list says of them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conformance_scripts import runner

run = runner()

SDK_TESTS = """
    def test_passes():
        pass

    def test_fails():
        assert False, "fails-canary"
"""


def run_sdk_tests(folder: Path, source: str, targets: list[str]) -> dict[str, object]:
    (folder / "sdk").mkdir()
    (folder / "sdk" / "test_sdk.py").write_text(textwrap.dedent(source))
    (folder / "work").mkdir()
    (folder / "tmp").mkdir()
    outcomes, _ = run.run_pytest(folder / "sdk", None, targets, folder / "work", folder / "tmp")
    return {test: outcome.outcome for test, outcome in outcomes.items()}


def test_a_run_whose_tests_all_ran_gives_each_outcome_failures_included(tmp_path: Path) -> None:
    outcomes = run_sdk_tests(tmp_path, SDK_TESTS, ["test_sdk.py"])
    assert outcomes == {"test_sdk.py::test_passes": "passed", "test_sdk.py::test_fails": "failed"}


def test_a_run_stopped_before_its_last_test_fails_the_step_though_its_report_was_written(tmp_path: Path) -> None:
    stopped = SDK_TESTS + """
    def test_stops_the_run():
        import pytest
        pytest.exit("stopped-canary", returncode=3)

    def test_never_reached():
        pass
"""
    with pytest.raises(RuntimeError, match=r"did not run its tests through \(exit 3\)") as raised:
        run_sdk_tests(tmp_path, stopped, ["test_sdk.py"])
    assert "stopped-canary" in str(raised.value)  # the log's end says why
    assert (tmp_path / "work" / "unix_local.json").exists()  # written, and still not taken


def test_a_test_module_that_does_not_import_is_named_as_configuration_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pytest stops with exit 2 when a module does not import (no test runs): the runner names the
    module and ends as a configuration problem (its exit 2), whichever run met it."""
    (tmp_path / "sdk" / "tests" / "sandbox").mkdir(parents=True)
    (tmp_path / "sdk" / "tests" / "sandbox" / "test_sdk.py").write_text("import no_such_module_canary\n" + SDK_TESTS)
    assert run.main(["--sdk-source", str(tmp_path / "sdk"), "--backend", "local"]) == 2
    said = capsys.readouterr().out
    assert "SDK test modules that do not import" in said and "  tests/sandbox/test_sdk.py: " in said, said
