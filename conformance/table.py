"""docs/compatibility.md from a conformance run's results (`run.py --results FILE`).

    python conformance/table.py RESULTS.json       # or: python conformance/run.py --write-docs

The whole file is generated: the table (collected / passed / not applicable / failed per backend,
the SDK's UnixLocal as the baseline), what each not-applicable category means (from
not_applicable.toml), and every failing test with the first line of its failure.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"
BASETEMP_PARENT = "/var/tmp"  # run.py's, named here for the text (run.py imports this module)


_PATH = re.compile(r"'/[^']*'|/tmp/\S+|\b[0-9a-f]{32,64}\b")


def by_cause(failed: dict[str, str]) -> list[tuple[str, list[str]]]:
    """Failures grouped by the first line of their failure with paths and ids masked, the
    commonest cause first: one cause often fails many tests."""
    groups: dict[str, list[str]] = {}
    for test, why in sorted(failed.items()):
        groups.setdefault(_PATH.sub("<path>", why), []).append(test)
    return sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))


def render(summary: dict) -> str:
    base = summary["baseline"]
    backends = summary["backends"]
    lines = [
        "# Compatibility: the Agents SDK's own sandbox tests",
        "",
        f"Measured {summary['measured']} on {summary['machine']}, openai-agents {summary['sdk_version']}. "
        "Made by `python conformance/run.py --write-docs`; `.ci/run` runs the same conformance and fails "
        "when a test fails that `conformance/not_applicable.toml` does not list.",
        "",
        "The runner downloads the openai-agents sdist of the installed version (its tests are not copied "
        f"here) and runs its `tests/sandbox` ({summary['tests_in_sandbox_folder']} tests) once unchanged, on the "
        "SDK's UnixLocal. The tests in scope are those that build a real UnixLocal client or session there "
        "(`UnixLocalSandboxClient(...)` or `UnixLocalSandboxSession(...)` of exactly that class; the SDK's "
        "fakes that subclass them, and tests that build only a state or options object, are not). Each "
        "backend then runs those tests with one thing swapped: where a test builds a UnixLocal client or "
        "session, `conformance/coderoom_conformance.py` hands it the backend's (`backend.client(spec)`, "
        "default limits); no test and no assertion is changed. The backends run at once, each its own pytest "
        "process with its own folders, and `backend.prune()` runs once all have ended.",
        "",
        "| backend | collected | passed | not applicable | failed | skipped (as on UnixLocal) | seconds | sandboxes left, pruned |",
        "|---|---|---|---|---|---|---|---|",
        f"| SDK UnixLocal (baseline, no isolation) | {base['collected']} | {base['passed']} | - | {base['failed']} "
        f"| {base['skipped']} | {base['seconds']:.0f} (all of tests/sandbox) | - |",
    ]
    for result in backends:
        lines.append(
            f"| coderoom {result['backend']} | {result['collected']} | {len(result['passed'])} | "
            f"{len(result['not_applicable'])} | {len(result['failed'])} | {len(result['skipped'])} | {result['seconds']:.0f} "
            f"| {result['leftovers']}{' (prune failed: ' + result['prune_error'] + ')' if result.get('prune_error') else ''} |"
        )
    lines += ["", "## Not applicable, by category", ""]
    counts = {r["backend"]: Counter(r["not_applicable"].values()) for r in backends}
    header = " | ".join(r["backend"] for r in backends)
    lines += [f"| category | {header} | what it means |", "|---|" + "---|" * len(backends) + "---|"]
    for name, meaning in summary["categories"].items():
        cells = " | ".join(str(counts[r["backend"]].get(name, 0)) for r in backends)
        lines.append(f"| {name} | {cells} | {meaning} |")
    lines += [
        "",
        "Each listed test has its reason in `conformance/not_applicable.toml`, reviewed as code. Most of "
        "the SDK's UnixLocal tests give their own tmp_path (or a tempfile.mkdtemp() folder) as the "
        "workspace root. Both backends take a root as a path inside the sandbox, where they put their own "
        "private workspace, never the host folder of that name. Local refuses roots that collide with "
        "what it mounts itself, /tmp included (each command has a private one), so the runner gives "
        f"pytest `--basetemp` and TMPDIR under {BASETEMP_PARENT} (a 0700 folder, removed after the run); "
        "a test is listed when it uses that folder from the host as well. Sandboxes left: sessions the "
        "SDK's tests build and never close (a session built directly, never started); `backend.prune()` "
        "removes them after the run, and counts them here.",
        "",
        "## Failing tests",
        "",
    ]
    for result in backends:
        lines.append(f"coderoom {result['backend']}: " + ("none." if not result["failed"] else "by cause:"))
        for cause, tests in by_cause(result["failed"]):
            lines.append(f"- {cause} ({len(tests)}):")
            lines += [f"  - `{test}`" for test in tests]
        lines.append("")
    lines.append("SDK UnixLocal (baseline): " + ("none." if not base["failures"] else ""))
    lines += [f"- `{test}`: {why}" for test, why in sorted(base["failures"].items())]
    return "\n".join(lines).rstrip() + "\n"


def write(summary: dict, path: Path = DOC) -> None:
    path.write_text(render(summary))


if __name__ == "__main__":
    write(json.loads(Path(sys.argv[1]).read_text()))
