"""Run the Agents SDK's own sandbox tests against coderoom's backends (issue 12, conformance).

    python conformance/run.py [--backend local --backend docker] [--results FILE] [--write-docs]

1. Fetch the sdist of the installed openai-agents (`sdist.fetch`) into a temporary folder.
2. Baseline: run its `tests/sandbox` unchanged, on the SDK's UnixLocal. The tests in scope are
   those that built a real UnixLocal client or session there (`coderoom_conformance` records it).
3. Every backend at once, one pytest process each: run the tests in scope with UnixLocal's
   construction swapped for the backend's (`coderoom_conformance`); once all have ended,
   `backend.prune()` what they left behind, and one summary per backend, in the order asked.
4. Verdict per backend, against `not_applicable.toml`: a test in scope that does not pass and is
   not listed, or that never ran, is a real failure; a listed test that passes, or that is no
   longer in scope, is a stale entry. Either makes the exit code 1; 0 when every test passes or is listed.

The SDK's tests give their pytest tmp_path (or a tempfile.mkdtemp() folder) as Manifest.root,
a path inside the sandbox for coderoom. Each command of coderoom's local sandbox has a private
/tmp, so no workspace root can be under /tmp: pytest's --basetemp and the runs' TMPDIR are
folders under BASETEMP_PARENT instead (made 0700 and removed after the run), which makes those
roots legal on every backend.

Why the backends run at once, and only after the baseline: the scope is the baseline's finding,
and a backend's run waits mostly on its sandboxes (containers starting, the SDK's own sleeps), so
running them side by side costs the longest one, not their sum. They share nothing: each has its
own --basetemp and TMPDIR folders, report and log; neither backend binds a host port (exposed
ports are refused); and no prune runs before every run has ended (a prune removes only what a dead
process owned, `sandboxes.leases`, so a live run's sandboxes are safe from it anyway). pytest's
tracebacks are `--tb=native`: its default long ones render source and arguments at about 0.2 s
of CPU per failure, and a backend's run has some 160 expected failures (its not-applicable tests).
A backend's failing tests have their part of its log shown (`excerpts`).

Exit codes: 0 ok; 1 a real failure or a problem with the list; 2 the sdist, a backend or a
module the SDK's tests import is not available here (configuration), or bad arguments; 124 a
pytest run took over RUN_TIMEOUT_S. Limits: `RUN_TIMEOUT_S` per pytest run.
The pytest runs get a minimal environment (no keys or tokens of this process).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import excerpts
import not_applicable
import sdist
import table
from coderoom.errors import EXIT_TIMEOUT

HERE = Path(__file__).resolve().parent
RUN_TIMEOUT_S = 1800  # one pytest run; the docker run of the tests in scope takes minutes
PYTEST_RAN = (0, 1)  # its tests all passed, or some failed; else interrupted, an internal or usage error, none collected
BASELINE = "unix_local"
BASETEMP_PARENT = Path(table.BASETEMP_PARENT)  # pytest's --basetemp goes here: not under /tmp (see above)
_PASSING = {"passed", "xfailed"}
_KEPT_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")


class TestsDoNotImport(Exception):
    """SDK test modules that do not import here (pytest stops at collection, exit 2, with none
    run): configuration, named module by module, not a crash of the runner."""


@dataclass
class Outcome:
    outcome: str
    message: str = ""
    built: bool = False


@dataclass
class BackendResult:
    backend: str
    seconds: float
    collected: int
    passed: list[str] = field(default_factory=list)
    not_applicable: dict[str, str] = field(default_factory=dict)  # test -> category
    skipped: list[str] = field(default_factory=list)  # skipped here and on the baseline
    failed: dict[str, str] = field(default_factory=dict)  # test -> first line of its failure
    stale: dict[str, str] = field(default_factory=dict)  # listed test -> what is wrong
    leftovers: int = 0  # removed by backend.prune() after the run
    prune_error: str = ""  # a prune that failed: a bug of the backend, and the run fails

    @property
    def ok(self) -> bool:
        return not self.failed and not self.stale and not self.prune_error


def run_pytest(
    source: Path, backend: str | None, targets: list[str], work: Path, basetemp: Path
) -> tuple[dict[str, Outcome], float]:
    """One pytest run of the SDK's tests in `source`, its tmp_paths under `basetemp`; each
    test's outcome and the run's seconds."""
    import coderoom

    name = backend or BASELINE
    report, args_file = work / f"{name}.json", work / f"{name}.args"
    args_file.write_text("\n".join(targets) + "\n")  # pytest reads @file: hundreds of ids
    env = {key: os.environ[key] for key in _KEPT_ENV if key in os.environ}
    tmpdir = basetemp / f"{name}-tmpdir"  # tempfile.mkdtemp() roots, outside /tmp like tmp_path
    tmpdir.mkdir(mode=0o700)
    env |= {
        "TMPDIR": str(tmpdir),
        "PYTHONPATH": os.pathsep.join([str(HERE), str(Path(coderoom.__file__).parents[1])]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "CODEROOM_CONFORMANCE_BACKEND": backend or "",
        "CODEROOM_CONFORMANCE_REPORT": str(report),
    }
    command = [
        sys.executable, "-m", "pytest", "-p", "coderoom_conformance", "-p", "no:cacheprovider",
        "-q", "--no-header", "--tb=native", "-o", "addopts=", f"--basetemp={basetemp / name}", f"@{args_file}",
    ]  # fmt: skip
    start = time.monotonic()
    with (work / f"{name}.log").open("w") as log:
        completed = subprocess.run(command, cwd=source, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S)
    seconds = time.monotonic() - start
    try:
        tests: dict[str, dict[str, Any]] | None = json.loads(report.read_text())["tests"]
    except (OSError, ValueError, KeyError):  # none written, or cut short
        tests = None
    broken = sorted(test for test, got in (tests or {}).items() if got["outcome"] == "collect-error")
    if broken:  # a module that does not import would otherwise shrink the scope unseen, or stop the run
        raise TestsDoNotImport("\n".join(f"  {test}: {tests[test]['message']}" for test in broken))
    if tests is None or completed.returncode not in PYTEST_RAN:
        tail = (work / f"{name}.log").read_text()[-3000:]
        raise RuntimeError(f"pytest on {name} did not run its tests through (exit {completed.returncode}):\n{tail}")
    return {nodeid: Outcome(**value) for nodeid, value in tests.items()}, seconds


def verdict(
    backend: str, outcomes: dict[str, Outcome], scope: list[str], baseline: dict[str, Outcome],
    listed: dict[str, not_applicable.Entry], seconds: float,
) -> BackendResult:  # fmt: skip
    """Each test in scope sorted into passed / not applicable / skipped / failed for `backend`."""
    result = BackendResult(backend, round(seconds, 1), len(scope))
    for test in scope:
        got = outcomes.get(test, Outcome("not run", "the test did not run"))
        entry = not_applicable.match(test, listed)
        if got.outcome in _PASSING:
            result.passed.append(test)
            if entry is not None:
                result.stale[test] = f"listed as not applicable ({entry.category}) but passes: remove it"
        elif got.outcome == "skipped" and baseline[test].outcome == "skipped":
            result.skipped.append(test)
        elif entry is not None and test in outcomes:  # listed: excused once it ran, never unrun
            result.not_applicable[test] = entry.category
        else:
            result.failed[test] = got.message if got.outcome == "failed" else f"{got.outcome}: {got.message}"
    for test in not_applicable.unknown_ids(listed, scope):
        result.stale[test] = "listed, but no test in scope has this id (renamed or removed in the SDK?)"
    return result


def baseline_summary(outcomes: dict[str, Outcome], scope: list[str], seconds: float) -> dict[str, object]:
    counts = {"passed": 0, "skipped": 0, "failed": 0}
    failures = {}
    for test in scope:
        kind = "passed" if outcomes[test].outcome in _PASSING else outcomes[test].outcome
        kind = kind if kind in counts else "failed"
        counts[kind] += 1
        if kind == "failed":
            failures[test] = outcomes[test].message
    return {"backend": BASELINE, "seconds": round(seconds, 1), "collected": len(scope), **counts, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=not_applicable.BACKENDS, help="default: all")
    parser.add_argument("--sdk-source", type=Path, help="an unpacked SDK source folder instead of downloading")
    parser.add_argument("--results", type=Path, help="write the results as JSON here")
    parser.add_argument("--write-docs", action="store_true", help="write docs/compatibility.md (table.py)")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress in CI logs
    backends = args.backend or list(not_applicable.BACKENDS)

    na, problems = not_applicable.load()
    if problems:
        print("not_applicable.toml:\n  " + "\n  ".join(problems))
        return 1
    unavailable = _unavailable(backends)
    if not BASETEMP_PARENT.is_dir():
        unavailable.append(f"{BASETEMP_PARENT} (for pytest's --basetemp, outside /tmp) is not a folder here")
    if unavailable:
        print("\n".join(unavailable))
        return 2
    with (
        tempfile.TemporaryDirectory(prefix="coderoom-conformance-") as tmp,
        _basetemp() as basetemp,
    ):
        work = Path(tmp)
        try:
            source = args.sdk_source or sdist.fetch(work)
        except sdist.SdistUnavailable as exc:
            print(exc)
            return 2
        try:
            base, base_seconds = run_pytest(source, None, ["tests/sandbox"], work, basetemp)
            scope = sorted(test for test, got in base.items() if got.built)
            print(f"baseline (SDK UnixLocal): {len(base)} tests in tests/sandbox, {len(scope)} build a UnixLocal client or session ({base_seconds:.0f} s)")
            results = _run_backends(backends, source, scope, base, na, work, basetemp)
        except TestsDoNotImport as exc:
            print(f"SDK test modules that do not import (pip install -e '.[conformance]'?):\n{exc}")
            return 2
        except subprocess.TimeoutExpired as exc:
            print(f"a conformance run took over RUN_TIMEOUT_S = {RUN_TIMEOUT_S} s: {exc.cmd[-1]}")
            return EXIT_TIMEOUT
    summary = {
        "sdk_version": sdist.installed_version(),
        "measured": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.node()}: {platform.system()} {platform.release()}, Python {platform.python_version()}",
        "tests_in_sandbox_folder": len(base),
        "baseline": baseline_summary(base, scope, base_seconds),
        "backends": [asdict(r) for r in results],
        "categories": na.categories,
    }
    if args.results:
        args.results.write_text(json.dumps(summary, indent=1) + "\n")
    if args.write_docs:
        table.write(summary)
    return 0 if all(r.ok for r in results) else 1


def _run_backends(
    names: list[str], source: Path, scope: list[str], base: dict[str, Outcome], na: not_applicable.NotApplicable,
    work: Path, basetemp: Path,
) -> list[BackendResult]:  # fmt: skip
    """Every backend's run of the tests in scope at once (module docstring); once all have ended,
    in the order of `names`, each one's verdict, prune and summary. A run that timed out, did not
    run its tests through or met a module that does not import raises (TimeoutExpired,
    RuntimeError, TestsDoNotImport) after the others have ended."""
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        runs = [pool.submit(run_pytest, source, name, scope, work, basetemp) for name in names]
        concurrent.futures.wait(runs)
    return [_finish_backend(name, *run.result(), scope, base, na, work) for name, run in zip(names, runs)]


def _finish_backend(
    name: str, outcomes: dict[str, Outcome], seconds: float, scope: list[str], base: dict[str, Outcome],
    na: not_applicable.NotApplicable, work: Path,
) -> BackendResult:  # fmt: skip
    from coderoom.sandboxes.registry import get_backend

    result = verdict(name, outcomes, scope, base, na.for_backend(name), seconds)
    try:
        result.leftovers = get_backend(name).prune()
    except Exception as exc:  # reported with the results, which are not lost
        result.prune_error = f"{type(exc).__name__}: {exc}"
    print(
        f"{name}: {result.collected} in scope, {len(result.passed)} passed, {len(result.not_applicable)} not applicable, "
        f"{len(result.skipped)} skipped (as on UnixLocal), {len(result.failed)} failed ({result.seconds:.0f} s, "
        f"{result.leftovers} leftovers pruned)"
    )
    for cause, tests in table.by_cause(result.failed):
        print(f"  FAILED ({len(tests)}) {cause}")
        print("".join(f"    {test}\n" for test in tests), end="")
    for test, why in sorted(result.stale.items()):
        print(f"  LIST {test}: {why}")
    if result.prune_error:
        print(f"  PRUNE failed: {result.prune_error}")
    if result.failed:
        print(excerpts.of_tests((work / f"{name}.log").read_text(errors="replace"), sorted(result.failed)), end="")
    return result


@contextlib.contextmanager
def _basetemp() -> Iterator[Path]:
    """A folder under BASETEMP_PARENT for the runs' tmp_paths (mode 0700), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="coderoom-conformance-", dir=BASETEMP_PARENT))
    try:
        yield folder
    finally:
        for top, names, _ in os.walk(folder):  # tests leave folders without search permission
            for name in names:
                if not os.path.islink(os.path.join(top, name)):  # never chmod through a link
                    os.chmod(os.path.join(top, name), 0o700)
        shutil.rmtree(folder)


def _unavailable(backends: list[str]) -> list[str]:
    from coderoom.sandboxes.registry import get_backend
    from coderoom.sandboxes.spec import SandboxSpec

    found = []
    for name in backends:
        reason = get_backend(name).unavailable_reason(SandboxSpec(backend=name))
        if reason:
            found.append(f"backend {name} is not available here: {reason}")
    return found


if __name__ == "__main__":
    sys.exit(main())
