"""The parts of a pytest log that belong to given tests: what the conformance runner shows of a
backend's log when tests fail there (`run.py`). The whole log is too long to show (a backend's
run has some 160 expected failures, its not-applicable tests), and a first line is too short to
act on; each failing test's own section (its traceback and captured output) is what a reader needs.
"""

from __future__ import annotations

import re

EXCERPT_CHARS = 6000  # of one test's section; its end is kept (the exception, then captured output)

# pytest's per-test section headers ("____ test_x[p] ____", "____ ERROR at setup of Cls.test_x ____")
# and its summary headers ("==== FAILURES ====", "==== short test summary info ===="); a title
# longer than the line gets a single "_" or "=" on each side
_HEADER = re.compile(r"^_+ (.+?) _+$|^=+ .* =+$", re.MULTILINE)
_ERROR_AT = re.compile(r"ERROR at \w+ of ")


def of_tests(log: str, tests: list[str], limit: int = EXCERPT_CHARS) -> str:
    """Each of `tests` (node ids) with its sections of `log` (at most `limit` characters, the end
    kept), indented under a `LOG node-id` line; a test with no section (it did not run) gets the
    log's last `limit` characters instead, which say why the run ended."""
    sections: dict[str, list[str]] = {}
    headers = list(_HEADER.finditer(log))
    for header, following in zip(headers, [*headers[1:], None]):
        if header.group(1) is not None:
            title = _ERROR_AT.sub("", header.group(1), count=1)
            sections.setdefault(title, []).append(log[header.start() : following.start() if following else len(log)])
    shown = []
    for test in tests:
        found = "".join(_own(sections.get(_title(test), []), test))
        if not found:
            text = "(no section for this test in the log, which ends:)\n" + log[-limit:]
        else:
            text = found if len(found) <= limit else "[...]\n" + found[-limit:].split("\n", 1)[-1]  # whole lines
        shown.append(f"  LOG {test}\n" + "".join(f"    {line}\n" for line in text.rstrip("\n").splitlines()))
    return "".join(shown)


def _own(sections: list[str], test: str) -> list[str]:
    """Of the sections titled as `test`, its own: a test of the same name in another file has the
    same title (pytest's headers name no file), and its section shown here would push this one's
    out of the limit. A native traceback names each frame's file by its path, so the sections that
    name the test's file are its own; when none does (an error in a conftest fixture's setup), all."""
    path = test.split("::")[0]
    mine = [section for section in sections if f'/{path}", line ' in section]
    return mine or sections


def _title(test: str) -> str:
    """pytest's section title for a node id: its class and function, dot-joined (no file)."""
    return ".".join(test.split("::")[1:])
